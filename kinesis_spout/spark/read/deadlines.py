"""When a running micro-batch job's ``task_timeout`` counts from.

A job is given up (:class:`~kinesis_spout.spark.loop.MicroBatchLoop`) when it
still runs ``task_timeout`` seconds after the time :class:`TaskClocks` gives it, which is

* while none of its tasks started yet (the executors busy, lost or not there yet): the
  latest look, so a job that waits for Spark, not on a record, is not taken for a hang;
* once one started: when the driver first saw it started;
* when it looks overdue: the time of that look if its tasks moved since the last one
  (Spark's status tracker counts the tasks that run and those that ended: a task
  started or ended), so a task that starts only when others of its job end (more tasks
  than free task slots: the job's tasks run in waves) has its whole ``task_timeout``
  too. A job is never given up before its latest task ran ``task_timeout``; one whose
  tasks run in waves is given up at most one ``task_timeout`` after its last task
  started or ended, plus the time between two looks.

Why both counts, not the tasks started: the tracker writes a stage at most every
100 ms, so of the events at a wave's turn (tasks ending, the next ones starting, all
within milliseconds) it may show only the first, one task ended and one fewer running,
until the stage's next event. The tasks started would not have moved; the counts
have. (A count that shows late only makes the clock start later.)

The tracker is asked only while the job waits for its first task and when it looks
overdue, not at each step of the loop.
"""

from __future__ import annotations

from collections.abc import Callable

TaskCounts = Callable[[int], tuple[int, int] | None]
"""A job's tasks that run and that ended (None: it has no Spark job yet, its driver-side
code runs), :meth:`~kinesis_spout.spark.read.jobs.ReadJobs.task_counts`."""


class TaskClocks:
    """What each running job's deadline counts from (see the module docstring)."""

    def __init__(self, task_counts: TaskCounts) -> None:
        self._task_counts = task_counts
        self._seen: dict[int, tuple[int, int]] = {}
        """Running jobs a task of which started: their task counts at the last look."""

    def counts_from(self, job: int, since: float, now: float, deadline: float) -> float:
        """The time ``job``'s deadline counts from, looked at ``now`` (``since``: what it
        counted from until now)."""
        seen = self._seen.get(job)
        if seen is not None and now - since <= deadline:
            return since
        counts = self._task_counts(job)
        if counts is None:  # no Spark job yet: its driver-side code runs, and counts
            return since
        if counts == (0, 0):  # waits for Spark, not on a record
            return now
        if counts == seen:
            return since
        self._seen[job] = counts
        return since if seen is None else now

    def forget(self, job: int) -> None:
        """``job`` no longer runs."""
        self._seen.pop(job, None)
