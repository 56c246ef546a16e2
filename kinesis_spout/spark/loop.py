"""The Spark job's micro-batch loop: plan, run, apply, checkpoint.

A micro-batch is **one Spark job** over every shard that can read now: the
:class:`~kinesis_spout.spark.plan.Planner` plans it, the tasks read and process on the
executors (:class:`~kinesis_spout.spark.read.jobs.ReadJobs`), their results are applied
here in completion order, and the checkpoints are saved per ``checkpoint_interval``. The
next micro-batch starts when the last is back; only when the running jobs are slow (past
twice the read deadline) does one start beside them, for the shards not in them, so a
shard is in at most one running job. A job still running ``task_timeout`` after its
tasks started (a function or transform that hangs) is given up: its Spark job is
cancelled and its plans are cut down (:mod:`~kinesis_spout.spark.quarantine`). Each
micro-batch that read or retried records has its progress line; the run ends with a
summary, a forced checkpoint and the reader closed.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

from kinesis_spout.config import SpoutConfig
from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.records import ShardKey
from kinesis_spout.spark.plan import Planner, ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.process.arrow import format_error
from kinesis_spout.spark.process.styles import RecordFunction
from kinesis_spout.spark.read.deadlines import TaskClocks
from kinesis_spout.spark.read.frames import FrameJobs
from kinesis_spout.spark.read.jobs import PLANS, ReadIsolation, ReadJobs
from kinesis_spout.spark.reports import (
    BatchReport,
    JobSummary,
    RunLimits,
    RunTotals,
    batch_report,
    print_progress,
)
from kinesis_spout.spark.startup import StartupTimes

log = logging.getLogger(__name__)

MIN_WAIT = 0.005
"""Shortest wait when nothing is ready (guards against a 0 delay)."""
MAX_WAIT = 0.5
"""Longest single wait, so that a stop request is seen quickly."""

Outcome = tuple[int, list[ReadPlan], list[ReadResult], ReadIsolation]


class MicroBatchLoop:
    """Runs micro-batches until stopped, ``max_batches`` or idle (see the module)."""

    def __init__(
        self,
        config: SpoutConfig,
        spark: Any,
        fn: RecordFunction,
        planner: Planner,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        progress: Callable[[BatchReport], None] | None = print_progress,
        metrics: MetricsCollector | None = None,
        frames: FrameJobs | None = None,
    ) -> None:
        """``fn``: the per-record function; ``frames``: the jobs of a transform or
        fan-out instead (``fn`` then only runs the probes of failure isolation)."""
        self.config = config
        self.planner = planner
        self.spout = planner.spout
        self.metrics: MetricsCollector = metrics if metrics is not None else self.spout.metrics
        self.clock = clock
        self.sleep = sleep
        self.progress = progress
        self.startup = StartupTimes()
        self.jobs = ReadJobs(
            spark,
            fn,
            ReadSettings.of(config),
            process_partitions=config.process_partitions,
            shards_per_task=config.shards_per_task,
            stopping=lambda: self.stopping,
            frames=frames,
        )
        self._stop_reason: str | None = None
        self._totals = RunTotals()
        self._batch_id = 0
        self._limits = RunLimits(config)
        self._job_ids = 0
        self._running: dict[int, Future[Outcome]] = {}
        self._started: dict[int, tuple[float, list[ReadPlan]]] = {}  # submitted, plans
        self._counts_from: dict[int, float] = {}
        """What each running job's ``task_timeout`` (and :meth:`_may_start`) counts from."""
        self._busy: dict[ShardKey, set[int]] = {}  # (stream, shard) -> the running jobs of it
        self._clocks = TaskClocks(self.jobs.task_counts)
        self._deadline = self._job_deadline(config)
        self.abandoned = 0
        """Jobs given up past their deadline."""
        self._stats: Any = None
        """The reader's stats at the last progress line (dead letters, expiries since)."""
        self._last_line: float | None = None
        self.last_report: BatchReport | None = None

    def _job_deadline(self, config: SpoutConfig) -> float | None:
        """How long a job may run after its tasks started (None: no limit). The
        per-record style's sandbox fails a record that runs past ``task_timeout`` alone,
        inside its task: for it, this is only a backstop."""
        if not config.task_timeout:
            return None
        if self.jobs.sandboxed:
            return 2 * config.task_timeout + self.jobs.settings.read_seconds
        return config.task_timeout

    # ------------------------------------------------------------------ stopping
    def request_stop(self, reason: str = "stop requested") -> None:
        """Finish the current micro-batches, then stop (safe from a signal handler)."""
        if self._stop_reason is None:
            self._stop_reason = reason

    @property
    def stopping(self) -> bool:
        return self._stop_reason is not None

    def summary(self, seconds: float) -> JobSummary:
        return self._totals.summary(seconds, self._stop_reason or "running")

    @property
    def micro_batches(self) -> int:
        """Micro-batch jobs submitted so far (each a Spark job, unless it failed and ran
        again in parts)."""
        return self._job_ids

    @property
    def spark_jobs(self) -> int:
        """Spark jobs started so far (micro-batches, their re-runs after failures, probes)."""
        return self.jobs.jobs_run

    # ------------------------------------------------------------------ the loop
    def run(self) -> JobSummary:
        """Open the reader, loop, and always end with a forced checkpoint and close."""
        started = self.clock()
        self.spout.open()
        self._stats = self.spout.stats()
        self.startup.mark("stream open")
        self.jobs.settings = self.planner.settings(self.jobs.settings)  # ARNs, efo consumers
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
            try:
                self._shut_down(failure)
            finally:
                self.jobs.close()
        return self.summary(self.clock() - started)

    def _shut_down(self, failure: BaseException | None) -> None:
        """Stop emitting, a forced checkpoint of what is done, close the reader. After an
        error, a failing checkpoint is logged, not raised."""
        spout = self.spout
        try:
            spout.deactivate()
            spout.checkpoint(force=True)
        except Exception:
            if failure is None:
                raise
            log.exception("final checkpoint failed while stopping after an error")
        finally:
            spout.close()
        log.info("driver stopped: %s", self._stop_reason)

    def _step(self, pool: ThreadPoolExecutor) -> None:
        """Start a job for the shards that can read, wait for a job, apply what finished."""
        now = self.clock()
        if not self.stopping and self._may_start(now):
            plans = self.planner.plan(self.config.batch_size, busy=set(self._busy))
            if plans:
                self._submit(pool, plans, now)
        if not self._running:
            self._idle()
            return
        timeout = min(max(self._wait_in(now), MIN_WAIT), MAX_WAIT)
        done, _ = wait_futures(list(self._running.values()), timeout, FIRST_COMPLETED)
        for job, future in list(self._running.items()):
            if future in done:
                started, _ = self._forget(job)
                self.startup.finish("first micro-batch")
                self._apply(started, *future.result())
        if self._deadline is not None:
            self._give_up_overdue(pool, self._deadline)
        self._after()

    def _may_start(self, now: float) -> bool:
        """A new micro-batch starts when none runs, or beside running ones that are
        slow (every one past twice the read deadline: a slow function, a hung task),
        so that the other shards go on."""
        return now > self._may_start_at()

    def _may_start_at(self) -> float:
        slow = 2 * self.jobs.settings.read_seconds
        return max((since + slow for since in self._counts_from.values()), default=-math.inf)

    def _wait_in(self, now: float) -> float:
        """How long to wait for the running jobs before looking again: until a shard may
        have a plan, or one may start beside them, or a checkpoint is due."""
        wake = self.planner.wake_in(self._busy)
        may_start_in = self._may_start_at() - now
        if may_start_in < 0:
            return wake
        return min(max(wake, may_start_in), self.planner.chores_in())

    def _submit(self, pool: ThreadPoolExecutor, plans: list[ReadPlan], now: float) -> None:
        if not self._job_ids:
            self.startup.mark("first plan")
        self._job_ids += 1
        job = self._job_ids
        self._running[job] = pool.submit(self._run_job, job, plans)
        self._started[job] = (now, plans)
        self._counts_from[job] = now
        for p in plans:
            self._busy.setdefault(p.key, set()).add(job)

    def _forget(self, job: int) -> tuple[float, list[ReadPlan]]:
        """A job no longer runs (done or given up): when it started, and its plans."""
        del self._running[job]
        self._clocks.forget(job)
        del self._counts_from[job]
        started, plans = self._started.pop(job)
        for p in plans:
            jobs = self._busy.get(p.key)
            if jobs is not None:
                jobs.discard(job)
                if not jobs:
                    del self._busy[p.key]
        return started, plans

    def _run_job(self, job: int, plans: list[ReadPlan]) -> Outcome:
        results, iso = self.jobs.run(job, plans)
        return job, plans, results, iso

    # ------------------------------------------------------------------ what comes back
    def _apply(
        self,
        started: float,
        job: int,
        plans: list[ReadPlan],
        results: list[ReadResult],
        iso: ReadIsolation,
    ) -> None:
        """A finished job: its statuses into the trackers, what failed alone quarantined,
        and its progress line (a job that read nothing has none)."""
        ok, failed = self.planner.apply(results)
        self.jobs.judge(job, iso)
        for alone, error in iso.alone:
            log.warning("task %d of shard %s/%s fails alone: %s", alone.task, *alone.key, error)
            ids = self.planner.fail_alone(alone, error)
            self.jobs.remember_poison(ids)  # its retries fail alone as known poison
            failed += len(ids)
        if iso.splits or iso.alone or iso.abandoned:
            self._limits.troubled()  # a micro-batch that fails is never "idle"
        retries = sum(len(p.retries) for p in plans) + sum(r.retried for r in results)
        records = sum(len(r) for r in results if r.end is not None) + retries
        if not (records or failed):
            self._totals.empty_batches += 1
            return
        self._report(started, records, ok, failed, retries, iso.splits)

    def _give_up_overdue(self, pool: ThreadPoolExecutor, deadline: float) -> None:
        """Give up the jobs running past ``deadline`` seconds after their tasks started:
        cancelled, their plans run again one job each, a retry plan of several records in
        halves; a lone plan that hangs is quarantined (its record failed alone) or, a read
        plan, read again with half its limit (:mod:`~kinesis_spout.spark.quarantine`)."""
        for job, (started, plans) in list(self._started.items()):
            if self._running[job].done():
                continue  # (a job done meanwhile is applied by the next step)
            now = self.clock()
            since = self._clocks.counts_from(job, self._counts_from[job], now, deadline)
            self._counts_from[job] = since
            if now - since <= deadline:
                continue
            self._forget(job)
            self.abandoned += 1
            self._limits.troubled()
            self.jobs.cancel(job)
            error = f"micro-batch job {job} ran past its deadline of {deadline:.1f}s"
            plan = plans[0]
            if len(plans) > 1 or (plan.is_retry and len(plan.retries) > 1):
                self._run_again(pool, error, plans)
                continue
            failed = self.planner.hung(plan, error)
            log.warning("%s (shard %s/%s): given up", error, *plan.key)
            if failed:  # delivered, and failed: their micro-batch's line
                self._report(started, len(failed), 0, len(failed), len(plan.retries), 0)

    def _run_again(self, pool: ThreadPoolExecutor, error: str, plans: list[ReadPlan]) -> None:
        """A given-up job of several plans runs again one job per plan, a retry plan of
        several records as two jobs of half of them, so only the part that hangs is given
        up next time. Not while stopping: the records stay in flight (the final checkpoint
        is before them) and are read again after a restart."""
        if self.stopping:
            log.warning("%s: given up while stopping; its records are read again next run", error)
            return
        log.warning("%s: given up; its %d plans run again in parts", error, len(plans))
        for part in PLANS.halves(plans):
            self._submit(pool, part, self.clock())

    # ------------------------------------------------------------------ progress
    def _report(
        self, started: float, records: int, ok: int, failed: int, retried: int, splits: int
    ) -> None:
        """The progress line of a micro-batch that read or retried records."""
        now = self.clock()
        since = max(started, self._last_line or started)  # overlapping jobs: counted once
        self._last_line = now
        stats = self.spout.stats()
        report = batch_report(
            self._batch_id,
            self._stats,
            stats,
            records=records,  # fast retries are deliveries too
            ok=ok,
            failed=failed,
            retried=retried,
            seconds=now - since,
            process_seconds=now - started,
            splits=splits,
        )
        self._stats = stats
        self._totals.add_report(report)
        self._batch_id += 1
        self.metrics.increment("batches")
        self.last_report = report
        if self.progress is not None:
            self.progress(report)
        self._check_limits(had_records=True)

    def _idle(self) -> None:
        """No job to run: wait for the next due shard or retry, check the limits."""
        self._after()  # checks the limits: an idle stop that is due stops here
        if self.stopping:
            return
        self.sleep(min(max(self.planner.wake_in(), MIN_WAIT), MAX_WAIT))
        self._check_limits(had_records=False)

    def _after(self) -> None:
        """Checkpoint per interval; the limits of a step that read nothing."""
        self.spout.checkpoint()
        self._check_limits(had_records=False)

    def _check_limits(self, had_records: bool) -> None:
        reason = self._limits.reason(
            self._batch_id, had_records, lambda: bool(self.spout.is_idle), self.clock()
        )
        if reason is not None:
            self.request_stop(reason)
