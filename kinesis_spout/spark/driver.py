"""The driver loop: spout batch -> Spark -> statuses -> ack/fail -> checkpoint.

One iteration (a *micro-batch*):

1. **Fill**: take records from the spout (retries first, then round-robin
   over shards: the spout's order) until ``batch_size`` records or
   ``batch_max_wait`` seconds. The spout never blocks; when it has nothing
   ready the loop waits ``spout.poll_delay()`` (the only sleep, injectable).
2. **Process**: the records become an Arrow table, the :class:`BatchRunner`
   runs the user's processing on Spark and brings back one status per record.
3. **Apply**: ok records are written to the row sink (if any), then acked;
   failed ones are failed with their error (the spout retries them, or
   dead-letters them after ``retry_limit`` retries). In fan-out mode the
   statuses go through the XOR acker first (:mod:`kinesis_spout.spark.process.fanout`).
4. **Checkpoint**: ``spout.checkpoint()``, which writes only when
   ``checkpoint_interval`` has passed. One progress line is printed.

Batch-level failures (a Spark job that fails, an exception escaping a
transform or a sink) are isolated by :mod:`kinesis_spout.spark.isolation`
(its rows: :mod:`kinesis_spout.spark.rowsplit`): the batch is split until the
poison records fail alone, or the job stops with :class:`BatchFailedError`
when the error is systematic.

Shutdown (``request_stop``, e.g. from SIGTERM/SIGINT): the current batch is
finished and applied, then a forced checkpoint and ``spout.close()``. Any
exception also ends with that final checkpoint, which covers only records
that are done: nothing unfinished is ever checkpointed.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field

import pyarrow as pa

from kinesis_spout.config import SpoutConfig
from kinesis_spout.metrics import MetricsCollector, NoopMetrics
from kinesis_spout.records import Record
from kinesis_spout.spark.process.arrow import format_error, records_to_arrow
from kinesis_spout.spark.process.ledger import FanOutLedger, TreeResults
from kinesis_spout.spark.reports import (
    BatchReport,
    JobSummary,
    RunLimits,
    SpoutLike,
    batch_report,
    print_progress,
)

__all__ = [
    "BatchFailedError",
    "BatchReport",
    "JobSummary",
    "SparkDriver",
    "SpoutLike",
    "print_progress",
]
from kinesis_spout.spark.isolation import BatchFailedError, Isolation, PoisonJudge, split_budget
from kinesis_spout.spark.loop import MAX_WAIT, MIN_WAIT, StopControl, shut_down
from kinesis_spout.spark.process.fastretry import FastRetry, count_fast_retries
from kinesis_spout.spark.process.followup import retry_failed
from kinesis_spout.spark.process.runner import BatchOutcome, BatchRunner
from kinesis_spout.spark.process.sinks import NullSink, RowSink
from kinesis_spout.spark.rowsplit import ROW_WORDS, settle_rows, split_rows

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Batch:
    """A micro-batch from fill to apply."""

    batch_id: int
    records: list[Record]
    roots: list[int] | None
    started: float
    """When its fill started."""
    iso: Isolation[int]
    done: list[BatchOutcome] = field(default_factory=list)
    """Outcomes of the (sub-)batches that ran, in row order."""
    compute_seconds: float = 0.0


def _last_try(record: Record, attempt: int | None) -> Record:
    """The record as last delivered: fast retries raised its delivery number."""
    if attempt is None or attempt <= record.attempt:
        return record
    return dataclasses.replace(record, attempt=attempt)


class SparkDriver(StopControl):
    """Runs micro-batches until stopped, ``max_batches`` or ``stop_when_idle``.

    ``clock`` and ``sleep`` are injectable for tests; ``progress`` gets one
    :class:`BatchReport` per non-empty batch (default: print its line);
    ``metrics`` (default: the spout's) counts batches and fast retries.
    ``pipeline`` (default on) overlaps the Spark work of one batch with
    filling the next; at most two batches are in flight.
    """

    def __init__(
        self,
        config: SpoutConfig,
        runner: BatchRunner,
        spout: SpoutLike,
        *,
        row_sink: RowSink | None = None,
        n_sinks: int = 0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        progress: Callable[[BatchReport], None] | None = print_progress,
        rng: random.Random | None = None,
        pipeline: bool = True,
        fast: FastRetry | None = None,
        metrics: MetricsCollector | None = None,
    ) -> None:
        super().__init__()
        self.metrics: MetricsCollector = getattr(spout, "metrics", NoopMetrics())
        self.metrics = metrics if metrics is not None else self.metrics
        self.config = config
        self.pipeline = pipeline
        self.runner = runner
        self.spout = spout
        self.row_sink: RowSink = row_sink or NullSink()
        self.clock = clock
        self.sleep = sleep
        self.progress = progress
        self.ledger: FanOutLedger | None = (
            FanOutLedger(n_sinks, config.message_timeout_or_none, rng)
            if runner.needs_roots
            else None
        )
        self._batch_id = 0
        self._limits = RunLimits(config)
        self._last_completion: float | None = None
        self._judge = PoisonJudge(ROW_WORDS)
        self._fast_retried = 0
        """Extra deliveries made by fast retries in the batch being applied."""
        self.fast: FastRetry | None = fast
        """Fast retries by follow-up jobs (transforms; None: none)."""
        self.last_report: BatchReport | None = None

    # --- control -------------------------------------------------------------------

    def run(self) -> JobSummary:
        """Open the spout, loop, and always end with a forced checkpoint and close.

        With ``pipeline`` the Spark work of batch ``k`` runs in a worker
        thread while this thread fills batch ``k + 1`` from the spout (the
        spout is only ever used from this thread). Acks, fails, checkpoints
        and progress happen here, in batch order.
        """
        started = self.clock()
        self.spout.open()
        self.startup.mark("stream open")
        pool = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="kinesis-spout-batch")
            if self.pipeline
            else None
        )
        failure: BaseException | None = None
        try:
            self.spout.activate()
            self.startup.mark("activate")
            ready: _Batch | None = None
            while True:
                if ready is None and not self.stopping:
                    ready = self._take()
                if ready is None:
                    self._tick(None, had_records=False)
                    if self.stopping:
                        break
                    continue
                future = pool.submit(self._compute, ready) if pool is not None else None
                if future is None:
                    self._compute(ready)
                following = None
                if pool is not None and not self.stopping and not self._at_batch_limit():
                    following = self._take(future)
                if future is not None:
                    future.result()
                report = self._complete(ready)
                self.startup.finish("first micro-batch")
                ready = following
                self._tick(report, had_records=True)
                if self.stopping and ready is None:
                    break
        except BaseException as exc:
            failure = exc
            self.request_stop(f"error: {format_error(exc)}")
            raise
        finally:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
            shut_down(self.spout, failure, self._stop_reason, self.row_sink.close)
        return self.summary(self.clock() - started)

    # --- one iteration -----------------------------------------------------------------

    def run_once(self) -> BatchReport | None:
        """One micro-batch without the pipeline (fill, process, apply,
        checkpoint); None if nothing came. The spout must be open."""
        batch = self._take()
        report = None
        if batch is not None:
            self._compute(batch)
            report = self._complete(batch)
        self._tick(report, had_records=batch is not None)
        return report

    def _tick(self, report: BatchReport | None, had_records: bool) -> None:
        """After each iteration: time out trees, checkpoint per interval, limits, progress."""
        self._expire_trees()
        self.spout.checkpoint()
        self._check_limits(had_records)
        if report is not None:
            self.metrics.increment("batches")
            self.last_report = report
            if self.progress is not None:
                self.progress(report)

    def _at_batch_limit(self) -> bool:
        return self._limits.at_batch_limit(self._batch_id)

    def _take(self, busy: Future[None] | None = None) -> _Batch | None:
        """Fill a batch from the spout (this thread only); None if nothing came."""
        started = self.clock()
        records = self._fill(started, busy)
        if not records:
            return None
        batch_id = self._batch_id
        self._batch_id += 1
        n = len(records)
        roots = self.ledger.new_roots(n) if self.ledger is not None else None
        return _Batch(
            batch_id,
            records,
            roots,
            started,
            Isolation(splits_left=split_budget(n)),
        )

    def _fill(self, started: float, busy: Future[None] | None = None) -> list[Record]:
        """Up to ``batch_size`` records within ``batch_max_wait``.

        ``busy`` is the previous batch's Spark work (pipeline): while it runs
        the wait is on it, and once it is done an empty fill gives up at once
        so that its acks are not held back.
        """
        cfg = self.config
        deadline = started + cfg.batch_max_wait
        records: list[Record] = []
        while not self.stopping:
            got = self.spout.next_batch(cfg.batch_size - len(records))
            records.extend(got)
            if len(records) >= cfg.batch_size:
                break
            now = self.clock()
            if now >= deadline:
                break
            if got:
                continue
            if not records and ((busy is not None and busy.done()) or self._idle_stop_due(now)):
                break
            wait = min(max(self.spout.poll_delay(), MIN_WAIT), MAX_WAIT, deadline - now)
            if busy is not None and not records and not busy.done():
                futures_wait([busy], timeout=wait)
            else:
                self.sleep(wait)
        return records

    def _compute(self, batch: _Batch) -> None:
        """The Spark part of a batch (any thread): outcomes are only collected."""
        t0 = self.clock()
        table = records_to_arrow(batch.records, batch.roots)

        def run_table(part: pa.Table, start: int = 0, stop: int | None = None) -> BatchOutcome:
            end = part.num_rows if stop is None else stop
            outcome = self.runner.run(batch.batch_id, part, start, end)
            if outcome.processed is not None and outcome.processed.num_rows:
                self.row_sink.write(batch.batch_id, outcome.processed)
            return outcome

        def run(start: int, stop: int) -> BatchOutcome:
            return run_table(table, start, stop)

        batch.done += split_rows(
            run,
            batch.iso,
            len(batch.records),
            batch_id=batch.batch_id,
            stopping=lambda: self.stopping,
        )
        if self.fast is not None and self.ledger is None:  # transforms: a follow-up job
            retry_failed(batch.records, batch.done, run_table, self.fast)
        batch.compute_seconds = self.clock() - t0

    def _complete(self, batch: _Batch) -> BatchReport:
        """Apply a computed batch (this thread): acks, fails, lone failures."""
        t0 = self.clock()
        records, owners, roots = batch.records, batch.records, batch.roots
        stats_before = self.spout.stats()
        results = [self._apply(outcome, owners, roots) for outcome in batch.done]
        results += settle_rows(
            self._judge, batch.batch_id, batch.iso, owners, lambda o: self._apply(o, owners, roots)
        )
        fast, self._fast_retried = self._fast_retried, 0
        now = self.clock()
        since = max(batch.started, self._last_completion or batch.started)
        self._last_completion = now
        report = batch_report(
            batch.batch_id,
            stats_before,
            self.spout.stats(),
            records=len(records) + fast,
            ok=sum(len(r.acked) for r in results),
            failed=sum(len(r.failed) for r in results),
            retried=sum(1 for r in records if r.attempt > 1) + fast,
            seconds=now - since,
            process_seconds=batch.compute_seconds + (now - t0),
            splits=batch.iso.splits,
            in_flight=self.spout.in_flight,
            pending_trees=self.ledger.pending if self.ledger is not None else 0,
        )
        self._totals.add_report(report)
        return report

    def _apply(
        self, outcome: BatchOutcome, owners: Sequence[Record], roots: Sequence[int] | None
    ) -> TreeResults:
        st = outcome.statuses
        if self.ledger is not None and roots is not None and outcome.ack_vals is not None:
            res = self.ledger.apply(
                owners, roots, st, outcome.ack_vals, outcome.sinks, self.clock()
            )
        elif self.ledger is not None and roots is not None:
            # A record that failed alone: no tree was started for it.
            res = TreeResults(
                failed=[(owners[r], st.errors.get(r, "failed")) for r in st.failed_rows.tolist()]
            )
        else:
            tried = st.attempts
            res = TreeResults(
                acked=[owners[r] for r in st.ok_rows.tolist()],
                failed=[
                    (_last_try(owners[r], tried.get(r)), st.errors.get(r, "failed"))
                    for r in st.failed_rows.tolist()
                ],
            )
            self._fast_retried += count_fast_retries(owners, tried, self.metrics)
        self._deliver(res)
        return res

    def _deliver(self, res: TreeResults) -> None:
        if res.acked:
            self.spout.ack_many(res.acked)
        if res.failed:
            self.spout.fail_many(res.failed)

    def _expire_trees(self) -> None:
        if self.ledger is not None and self.ledger.pending:
            res = self.ledger.expire(self.clock())
            if res.failed:
                log.warning("%d fan-out trees timed out", len(res.failed))
                self._totals.failed += len(res.failed)
                self._deliver(res)

    # --- stopping ------------------------------------------------------------------

    def _is_idle(self) -> bool:
        pending = self.ledger.pending if self.ledger is not None else 0
        return bool(self.spout.is_idle) and pending == 0

    def _idle_stop_due(self, now: float) -> bool:
        return self._limits.idle_stop_due(now, self._is_idle())

    def _check_limits(self, had_records: bool) -> None:
        reason = self._limits.reason(self._batch_id, had_records, self._is_idle, self.clock())
        if reason is not None:
            self.request_stop(reason)
