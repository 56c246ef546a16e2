"""The micro-batch loop of executor reads (``read_on = "executors"``, the default).

Each shard is a pipeline of its own: as soon as a shard's task is back, its
next one is planned, so a slow shard never holds the others back and the
cost of starting a Spark job overlaps the work of the other shards.

1. **Plan** (:meth:`ExecutorReadSpout.plan`) for every shard without a task
   running: its due retries (a retry task), else a read (position and limit).
2. **Run** (:class:`~kinesis_spout.spark.readjobs.ReadJobs`): each task is a
   Spark job of its own, submitted from a thread; the executors read,
   de-aggregate and process; only statuses, the payloads of failed records
   and the read's end come back.
3. **Apply** (this thread, in completion order): statuses into the trackers
   (failed records retried, or dead-lettered after ``retry_limit`` retries),
   position advanced, resharding followed; a task that failed alone judged.
   A task still running ``task_timeout`` seconds after it started (a
   function that hangs) is given up: its Spark job is cancelled, the records
   of a retry task fail (retried, or dead-lettered), and a read task's shard
   is read again from the same position. The message timeout does not fail
   the records a running task holds.
4. **Checkpoint** per ``checkpoint_interval`` (and early when a shard's replay
   window is half full). A *micro-batch* is what completed since the last
   progress line: one line when ``batch_size`` records are done or
   ``batch_max_wait`` passed.

The config, sinks, progress lines, summary, signals and final checkpoint are
those of the driver-read loop (:mod:`kinesis_spout.spark.driver`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field, replace
from typing import Any

from kinesis_spout.config import SpoutConfig
from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.spark.arrow import format_error
from kinesis_spout.spark.loop import MAX_WAIT, MIN_WAIT, StopControl, shut_down
from kinesis_spout.spark.planner import ExecutorReadSpout
from kinesis_spout.spark.processing import RecordFunction
from kinesis_spout.spark.readjobs import ReadIsolation, ReadJobs
from kinesis_spout.spark.readtask import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.reports import (
    BatchReport,
    JobSummary,
    RunLimits,
    _max_behind,
    _stat,
    print_progress,
)

log = logging.getLogger(__name__)

Outcome = tuple[ReadPlan, list[ReadResult], ReadIsolation]


@dataclass(slots=True)
class _Window:
    """What completed since the last progress line."""

    started: float
    records: int = 0
    ok: int = 0
    failed: int = 0
    retried: int = 0
    dead_before: int = 0
    expired_before: int = 0
    splits: int = 0
    seconds: list[float] = field(default_factory=list)


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
        metrics: MetricsCollector | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.spout = spout
        self.metrics: MetricsCollector = metrics if metrics is not None else spout.metrics
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
        self._running: dict[str, Future[Outcome]] = {}
        self._started: dict[str, tuple[float, ReadPlan]] = {}
        self._deadline = config.task_timeout or None
        self.abandoned = 0
        """Tasks given up past their deadline."""
        self._window: _Window | None = None
        self._since: float | None = None  # first task started since the last progress line
        self.last_report: BatchReport | None = None

    def run(self) -> JobSummary:
        """Open the spout, loop, and always end with a forced checkpoint and close."""
        started = self.clock()
        self.spout.open()
        if self.spout.consumer_arn is not None:  # consumer = "efo": the tasks subscribe
            self.jobs.settings = replace(self.jobs.settings, consumer_arn=self.spout.consumer_arn)
        failure: BaseException | None = None
        pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="kinesis-spout-read")
        try:
            self.spout.activate()
            while not (self.stopping and not self._running):
                self._step(pool)
        except BaseException as exc:
            failure = exc
            self.request_stop(f"error: {format_error(exc)}")
            raise
        finally:
            pool.shutdown(wait=failure is None, cancel_futures=True)
            shut_down(self.spout, failure, self._stop_reason)
        return self.summary(self.clock() - started)

    def _step(self, pool: ThreadPoolExecutor) -> None:
        """Start tasks for idle shards, wait for one to finish, apply what finished."""
        now = self.clock()
        if not self.stopping:
            for plan in self.spout.plan(self.config.batch_size, busy=set(self._running)):
                self._running[plan.shard_id] = pool.submit(self._run_plan, plan)
                self._started[plan.shard_id] = (now, plan)
                if self._since is None:
                    self._since = now
        if not self._running:
            self._idle(now)
            return
        timeout = min(max(self.spout.wake_in(), MIN_WAIT), MAX_WAIT)
        done, _ = wait_futures(list(self._running.values()), timeout, FIRST_COMPLETED)
        for shard_id, future in list(self._running.items()):
            if future in done:
                del self._running[shard_id]
                del self._started[shard_id]
                self._apply(*future.result())
        if self._deadline is not None:
            self._give_up_overdue(self.clock(), self._deadline)
        # A line at once when everything read is done (caught up): no records wait in it.
        self._after(force=(self.stopping and not self._running) or bool(self.spout.is_idle))

    def _give_up_overdue(self, now: float, deadline: float) -> None:
        """Give up the tasks running past ``deadline`` seconds (see the module docstring)."""
        for shard_id, (started, plan) in list(self._started.items()):
            if now - started <= deadline:
                continue
            del self._running[shard_id], self._started[shard_id]
            self.abandoned += 1
            self.jobs.cancel(plan.task)
            error = f"task {plan.task} ran past its deadline of {deadline:.1f}s"
            failed = self.spout.fail_alone(plan, error) if plan.is_retry else []
            log.warning(
                "%s (shard %s): given up; %s",
                error,
                shard_id,
                f"its {len(failed)} records failed" if plan.is_retry else "the shard is read again",
            )

    def _run_plan(self, plan: ReadPlan) -> Outcome:
        results, iso = self.jobs.run(plan.task, [plan])
        return plan, results, iso

    def _apply(self, plan: ReadPlan, results: list[ReadResult], iso: ReadIsolation) -> None:
        w = self._window
        if w is None:
            stats = self.spout.stats()
            dead = _stat(stats, "dead_lettered") or 0
            expired = _stat(stats, "expired") or 0
            w = self._window = _Window(
                self._since or self.clock(), dead_before=dead, expired_before=expired
            )
        ok, failed = self.spout.apply(results)
        self.jobs.judge(plan.task, iso)
        for alone, error in iso.alone:
            log.warning("task %d of shard %s fails alone: %s", alone.task, alone.shard_id, error)
            ids = self.spout.fail_alone(alone, error)
            self.jobs.remember_poison(ids)  # its retries fail alone as known poison
            failed += len(ids)
        w.ok += ok
        w.failed += failed
        w.retried += len(plan.retries) + sum(r.retried for r in results)
        w.records += sum(len(r) for r in results if r.position is not None) + len(plan.retries)
        w.records += sum(r.retried for r in results)  # fast retries are deliveries too
        w.splits += iso.splits

    def _idle(self, now: float) -> None:
        """No task to run: wait for the next due shard or retry, check the limits."""
        self._after(force=True)
        if self.stopping or self._limits.idle_stop_due(now, bool(self.spout.is_idle)):
            self._check_limits(had_records=False)
            return
        self.sleep(min(max(self.spout.wake_in(), MIN_WAIT), MAX_WAIT))
        self._check_limits(had_records=False)

    def _after(self, force: bool) -> None:
        """Checkpoint per interval; a progress line once a micro-batch's worth is done."""
        self.spout.checkpoint()
        w = self._window
        if w is None:
            return
        now = self.clock()
        due = w.records >= self.config.batch_size or now - w.started >= self.config.batch_max_wait
        if not (due or force):
            return
        self._window = None
        self._since = None
        if w.records or w.failed:
            self._report(w, now)
        self._check_limits(had_records=bool(w.records or w.failed))

    def _report(self, w: _Window, now: float) -> None:
        stats = self.spout.stats()
        dead = (_stat(stats, "dead_lettered") or 0) - w.dead_before
        expired = (_stat(stats, "expired") or 0) - w.expired_before
        self._totals.add(w.records, w.ok, w.failed, w.retried, dead, now - w.started, expired)
        age = _stat(stats, "checkpoint_age")
        report = BatchReport(
            batch_id=self._batch_id,
            records=w.records,
            ok=w.ok,
            failed=w.failed,
            retried=w.retried,
            dead_lettered=dead,
            in_flight=int(_stat(stats, "in_flight") or 0),
            pending_trees=0,
            millis_behind_latest=_max_behind(stats),
            checkpoint_age=float(age) if age is not None else None,
            seconds=max(now - w.started, 1e-9),
            process_seconds=now - w.started,
            splits=w.splits,
            expired=expired,
        )
        self._batch_id += 1
        self.metrics.increment("batches")
        self.last_report = report
        if self.progress is not None:
            self.progress(report)

    def _check_limits(self, had_records: bool) -> None:
        reason = self._limits.reason(
            self._batch_id, had_records, lambda: bool(self.spout.is_idle), self.clock()
        )
        if reason is not None:
            self.request_stop(reason)
