"""When a running micro-batch job's deadline counts from (:class:`TaskClocks`).

A job is given up when it still runs its deadline past the time this gives it: the
latest look while none of its tasks has started (it waits for Spark, not on a record),
else when its tasks last started or ended as Spark's status tracker shows them, so
tasks that run in waves each get their whole deadline. Both the running and the ended
counts are watched: the tracker writes a stage only once per
``spark.ui.liveUpdatePeriod`` and may show only the first of a wave's events. The
tracker is asked only while a job waits for its first task and when it looks overdue.
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
