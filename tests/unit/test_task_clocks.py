"""What a running micro-batch job's deadline counts from (pure logic: a scripted count
of started tasks stands in for Spark's status tracker)."""

from __future__ import annotations

from kinesis_spout.spark.read.deadlines import TaskClocks

DEADLINE = 10.0


class Started:
    """The tasks each job started, as the test sets them; counts the looks."""

    def __init__(self) -> None:
        self.by_job: dict[int, int | None] = {}
        self.looks = 0

    def __call__(self, job: int) -> int | None:
        self.looks += 1
        return self.by_job.get(job)


def test_a_job_waiting_for_spark_counts_from_each_look() -> None:
    started = Started()
    clocks = TaskClocks(started)
    started.by_job[1] = 0
    assert clocks.counts_from(1, 0.0, 5.0, DEADLINE) == 5.0
    assert clocks.counts_from(1, 5.0, 30.0, DEADLINE) == 30.0


def test_a_job_with_no_spark_job_yet_counts_from_its_start() -> None:
    started = Started()
    clocks = TaskClocks(started)
    assert clocks.counts_from(1, 0.0, 5.0, DEADLINE) == 0.0
    assert clocks.counts_from(1, 0.0, 11.0, DEADLINE) == 0.0  # overdue


def test_once_a_task_started_the_tracker_is_asked_only_when_the_job_looks_overdue() -> None:
    started = Started()
    clocks = TaskClocks(started)
    started.by_job[1] = 2
    assert clocks.counts_from(1, 1.0, 2.0, DEADLINE) == 1.0  # started: its time from 1.0
    looks = started.looks
    for now in (3.0, 6.0, 11.0):
        assert clocks.counts_from(1, 1.0, now, DEADLINE) == 1.0
    assert started.looks == looks  # not overdue yet: nothing asked
    assert clocks.counts_from(1, 1.0, 11.5, DEADLINE) == 1.0  # overdue, no new task
    assert started.looks == looks + 1


def test_a_task_started_since_the_last_look_restarts_the_clock_at_the_overdue_look() -> None:
    started = Started()
    clocks = TaskClocks(started)
    started.by_job[1] = 2
    assert clocks.counts_from(1, 0.0, 0.5, DEADLINE) == 0.0
    started.by_job[1] = 4  # the second wave started (the first two ended)
    assert clocks.counts_from(1, 0.0, 10.5, DEADLINE) == 10.5
    assert clocks.counts_from(1, 10.5, 20.0, DEADLINE) == 10.5
    assert clocks.counts_from(1, 10.5, 21.0, DEADLINE) == 10.5  # overdue: no task since


def test_a_forgotten_job_starts_over() -> None:
    started = Started()
    clocks = TaskClocks(started)
    started.by_job[1] = 3
    assert clocks.counts_from(1, 0.0, 1.0, DEADLINE) == 0.0
    clocks.forget(1)
    started.by_job[1] = 4  # a new job of the same id counts from its first start again
    assert clocks.counts_from(1, 2.0, 3.0, DEADLINE) == 2.0
