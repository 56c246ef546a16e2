"""The Spark job's plans, read tasks and results driven in-process, without Spark: the
planner, the read task and the results applied, as the micro-batch loop runs them."""

from __future__ import annotations

import time

from kinesis_spout.records import Record
from kinesis_spout.spark.plan import Planner, ReadSettings
from kinesis_spout.spark.task import run_plans


def run_tasks(sp: Planner, *, want: int, timeout: float = 30.0) -> list[list[str]]:
    """Plan, read (a task per plan) and apply in-process until ``want`` records were
    processed; the ids each read task processed (a record's data up to its first ``|``).
    The planner adds its streams' ARNs to the settings, as the job does."""
    settings = sp.settings(ReadSettings.of(sp.spout.config))
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

            sp.apply(run_plans([plan], settings, fn, batch_id=1))
            if done:
                tasks.append(done)
                seen += len(done)
    return tasks
