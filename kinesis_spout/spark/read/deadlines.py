"""When a running micro-batch job's ``task_timeout`` counts from.

A job is given up (:class:`~kinesis_spout.spark.executor_driver.ExecutorDriver`) when it
still runs ``task_timeout`` seconds after the time :class:`TaskClocks` gives it, which is

* while none of its tasks started yet (the executors busy, lost or not there yet): the
  latest look, so a job that waits for Spark, not on a record, is not taken for a hang;
* once one started: when the driver first saw it started;
* when it looks overdue: the time of that look if a task started since the last one
  (Spark's status tracker counts the tasks started), so a task that starts only when
  others of its job end (more tasks than free task slots: the job's tasks run in
  waves) has its whole ``task_timeout`` too. A job is never given up before its
  latest task ran ``task_timeout``; one whose tasks start in waves is given up at most
  one ``task_timeout`` after its last task started, plus the time between two looks.

The tracker is asked only while the job waits for its first task and when it looks
overdue, not at each step of the loop.
"""

from __future__ import annotations

from collections.abc import Callable

TasksStarted = Callable[[int], "int | None"]
"""The tasks of a job that started so far (None: it has no Spark job yet, its driver-side
code runs), :meth:`~kinesis_spout.spark.read.jobs.ReadJobs.tasks_started`."""


class TaskClocks:
    """What each running job's deadline counts from (see the module docstring)."""

    def __init__(self, tasks_started: TasksStarted) -> None:
        self._tasks_started = tasks_started
        self._seen: dict[int, int] = {}
        """Running jobs a task of which started: the tasks started at the last look."""

    def counts_from(self, job: int, since: float, now: float, deadline: float) -> float:
        """The time ``job``'s deadline counts from, looked at ``now`` (``since``: what it
        counted from until now)."""
        seen = self._seen.get(job)
        if seen is not None and now - since <= deadline:
            return since
        started = self._tasks_started(job)
        if started is None:  # no Spark job yet: its driver-side code runs, and counts
            return since
        if started == 0:  # waits for Spark, not on a record
            return now
        if started <= (seen or 0):
            return since
        self._seen[job] = started
        return since if seen is None else now

    def forget(self, job: int) -> None:
        """``job`` no longer runs."""
        self._seen.pop(job, None)
