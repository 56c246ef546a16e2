"""What a running micro-batch job's deadline counts from (pure logic: scripted task
counts stand in for Spark's status tracker)."""

from __future__ import annotations

from kinesis_spout.spark.read.deadlines import TaskClocks

DEADLINE = 10.0


class Counts:
    """The (running, ended) tasks of each job, as the test sets them; counts the looks."""

    def __init__(self) -> None:
        self.by_job: dict[int, tuple[int, int] | None] = {}
        self.looks = 0

    def __call__(self, job: int) -> tuple[int, int] | None:
        self.looks += 1
        return self.by_job.get(job)


def test_a_job_waiting_for_spark_counts_from_each_look() -> None:
    counts = Counts()
    clocks = TaskClocks(counts)
    counts.by_job[1] = (0, 0)
    assert clocks.counts_from(1, 0.0, 5.0, DEADLINE) == 5.0
    assert clocks.counts_from(1, 5.0, 30.0, DEADLINE) == 30.0


def test_a_job_with_no_spark_job_yet_counts_from_its_start() -> None:
    counts = Counts()
    clocks = TaskClocks(counts)
    assert clocks.counts_from(1, 0.0, 5.0, DEADLINE) == 0.0
    assert clocks.counts_from(1, 0.0, 11.0, DEADLINE) == 0.0  # overdue


def test_once_a_task_started_the_tracker_is_asked_only_when_the_job_looks_overdue() -> None:
    counts = Counts()
    clocks = TaskClocks(counts)
    counts.by_job[1] = (2, 0)
    assert clocks.counts_from(1, 1.0, 2.0, DEADLINE) == 1.0  # started: its time from 1.0
    looks = counts.looks
    for now in (3.0, 6.0, 11.0):
        assert clocks.counts_from(1, 1.0, now, DEADLINE) == 1.0
    assert counts.looks == looks  # not overdue yet: nothing asked
    assert clocks.counts_from(1, 1.0, 11.5, DEADLINE) == 1.0  # overdue, no task moved
    assert counts.looks == looks + 1


def test_tasks_that_moved_since_the_last_look_restart_the_clock_at_the_overdue_look() -> None:
    counts = Counts()
    clocks = TaskClocks(counts)
    counts.by_job[1] = (2, 0)
    assert clocks.counts_from(1, 0.0, 0.5, DEADLINE) == 0.0
    counts.by_job[1] = (2, 2)  # the second wave started (the first two ended)
    assert clocks.counts_from(1, 0.0, 10.5, DEADLINE) == 10.5
    assert clocks.counts_from(1, 10.5, 20.0, DEADLINE) == 10.5
    assert clocks.counts_from(1, 10.5, 21.0, DEADLINE) == 10.5  # overdue: nothing moved


def test_a_turn_the_tracker_shows_only_in_part_still_restarts_the_clock() -> None:
    """Of a wave's turn the tracker may show only its first event: one task ended and
    one fewer running; the tasks started (running + ended) did not move."""
    counts = Counts()
    clocks = TaskClocks(counts)
    counts.by_job[1] = (2, 0)
    assert clocks.counts_from(1, 0.0, 0.5, DEADLINE) == 0.0
    counts.by_job[1] = (1, 1)
    assert clocks.counts_from(1, 0.0, 10.5, DEADLINE) == 10.5


def test_a_forgotten_job_starts_over() -> None:
    counts = Counts()
    clocks = TaskClocks(counts)
    counts.by_job[1] = (3, 0)
    assert clocks.counts_from(1, 0.0, 1.0, DEADLINE) == 0.0
    clocks.forget(1)
    counts.by_job[1] = (4, 0)  # a new job of the same id counts from its first start again
    assert clocks.counts_from(1, 2.0, 3.0, DEADLINE) == 2.0
