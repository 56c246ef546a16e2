"""The micro-batch loop of executor reads (``read_on = "executors"``, the default).

One iteration:

1. **Plan** (:meth:`ExecutorReadSpout.plan`): a retry task per shard with due
   retries, then a read task per readable shard (position and limit).
2. **Run** (:class:`~kinesis_spout.spark.readjobs.ReadJobs`): one Spark job; the
   executors read, de-aggregate and process; only statuses, the payloads of
   failed records and each read's end come back.
3. **Apply**: statuses into the trackers (failed records retried, or
   dead-lettered after ``retry_limit`` retries), positions advanced, resharding
   followed; lone failures of a failed job judged.
4. **Checkpoint** per ``checkpoint_interval`` (and early when a shard's replay
   window is half full); one progress line.

The config, sinks, progress lines, summary, signals and final checkpoint are
those of the driver-read loop (:mod:`kinesis_spout.spark.driver`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kinesis_spout.config import SpoutConfig
from kinesis_spout.spark.arrow import format_error
from kinesis_spout.spark.loop import MAX_WAIT, MIN_WAIT, StopControl
from kinesis_spout.spark.planner import ExecutorReadSpout
from kinesis_spout.spark.processing import RecordFunction
from kinesis_spout.spark.readjobs import ReadJobs
from kinesis_spout.spark.readtask import ReadSettings
from kinesis_spout.spark.reports import (
    BatchReport,
    JobSummary,
    RunLimits,
    _max_behind,
    _stat,
    print_progress,
)

log = logging.getLogger(__name__)


class ExecutorDriver(StopControl):
    """Runs executor-read micro-batches until stopped, ``max_batches`` or idle."""

    def __init__(
        self,
        config: SpoutConfig,
        spark: Any,
        fn: RecordFunction,
        spout: ExecutorReadSpout,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        progress: Callable[[BatchReport], None] | None = print_progress,
    ) -> None:
        super().__init__()
        self.config = config
        self.spout = spout
        self.clock = clock
        self.sleep = sleep
        self.progress = progress
        self.jobs = ReadJobs(
            spark,
            fn,
            ReadSettings.of(config),
            process_partitions=config.process_partitions,
            stopping=lambda: self.stopping,
        )
        self._batch_id = 0
        self._limits = RunLimits(config)
        self.last_report: BatchReport | None = None

    def run(self) -> JobSummary:
        """Open the spout, loop, and always end with a forced checkpoint and close."""
        started = self.clock()
        self.spout.open()
        failure: BaseException | None = None
        try:
            self.spout.activate()
            while not self.stopping:
                self.run_once()
        except BaseException as exc:
            failure = exc
            self.request_stop(f"error: {format_error(exc)}")
            raise
        finally:
            self._shutdown(failure)
        return self.summary(self.clock() - started)

    def _shutdown(self, failure: BaseException | None) -> None:
        try:
            self.spout.deactivate()
            self.spout.checkpoint(force=True)
        except Exception:
            if failure is None:
                raise
            log.exception("final checkpoint failed while stopping after an error")
        finally:
            self.spout.close()
        log.info("driver stopped: %s", self._stop_reason)

    def run_once(self) -> BatchReport | None:
        """One micro-batch (plan, run, apply, checkpoint); None if nothing was read."""
        started = self.clock()
        plans = self.spout.plan(self.config.batch_size)
        if not plans:
            self._wait(started)
            self._after(None, had_records=False)
            return None
        batch_id = self._batch_id
        dead_before = _stat(self.spout.stats(), "dead_lettered") or 0
        results, iso = self.jobs.run(batch_id, plans)
        ok, failed = self.spout.apply(results)
        self.jobs.judge(batch_id, iso)
        for plan, error in iso.alone:
            log.warning(
                "batch %d: task %d of shard %s fails alone: %s",
                batch_id,
                plan.task,
                plan.shard_id,
                error,
            )
            failed += self.spout.fail_alone(plan, error)
        retried = sum(len(p.retries) for p in plans)
        records = sum(len(r) for r in results if r.position is not None) + retried
        stats = self.spout.stats()
        dead = (_stat(stats, "dead_lettered") or 0) - dead_before
        now = self.clock()
        report = None
        if records or failed:
            self._batch_id += 1
            self._totals.add(records, ok, failed, retried, dead, now - started)
            age = _stat(stats, "checkpoint_age")
            report = BatchReport(
                batch_id=batch_id,
                records=records,
                ok=ok,
                failed=failed,
                retried=retried,
                dead_lettered=dead,
                in_flight=int(_stat(stats, "in_flight") or 0),
                pending_trees=0,
                millis_behind_latest=_max_behind(stats),
                checkpoint_age=float(age) if age is not None else None,
                seconds=max(now - started, 1e-9),
                process_seconds=now - started,
                splits=iso.splits,
            )
        self._after(report, had_records=bool(records or failed))
        return report

    def _wait(self, started: float) -> None:
        if self._limits.idle_stop_due(started, bool(self.spout.is_idle)):
            return
        self.sleep(min(max(self.spout.wake_in(), MIN_WAIT), MAX_WAIT))

    def _after(self, report: BatchReport | None, had_records: bool) -> None:
        self.spout.checkpoint()
        reason = self._limits.reason(
            self._batch_id, had_records, lambda: bool(self.spout.is_idle), self.clock()
        )
        if reason is not None:
            self.request_stop(reason)
        if report is not None:
            self.last_report = report
            if self.progress is not None:
                self.progress(report)
