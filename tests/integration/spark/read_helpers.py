"""Executor reads driven in-process, without Spark: the driver's planner, the read
task and the results applied, as the micro-batch loop runs them."""

from __future__ import annotations

import time

from kinesis_spout.records import Record
from kinesis_spout.spark.read.plan import ReadSettings
from kinesis_spout.spark.read.planner import ExecutorReadPlanner
from kinesis_spout.spark.read.streams import StreamPlanners
from kinesis_spout.spark.read.task import run_plan


def run_tasks(
    sp: ExecutorReadPlanner | StreamPlanners, *, want: int, timeout: float = 30.0
) -> list[list[str]]:
    """Plan, read (a task per plan) and apply in-process until ``want`` records were
    processed; the ids each read task processed (a record's data up to its first ``|``).
    The job's planners add their streams' ARNs to the settings, as the job does."""
    settings = ReadSettings.of(sp.config)
    if isinstance(sp, StreamPlanners):
        settings = sp.settings(settings)
    tasks: list[list[str]] = []
    seen = 0
    deadline = time.monotonic() + timeout
    while seen < want:
        assert time.monotonic() < deadline, f"stalled after {seen} records: {tasks}"
        plans = [p for p in sp.plan(10_000) if not p.is_retry]
        if not plans:
            time.sleep(min(sp.wake_in(), 0.05))
            continue
        for plan in plans:
            done: list[str] = []

            def fn(r: Record, done: list[str] = done) -> None:
                done.append(r.data.split(b"|", 1)[0].decode())

            res = run_plan(plan, settings, fn, batch_id=1)
            sp.apply([res])
            if done:
                tasks.append(done)
                seen += len(done)
    return tasks
