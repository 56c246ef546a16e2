"""What the Spark job's micro-batch loop reports: one progress line per micro-batch
(:class:`BatchReport`) and the summary of a run (:class:`JobSummary`), and when a run
stops by itself (:class:`RunLimits`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kinesis_spout.config import SpoutConfig


@dataclass(frozen=True, slots=True)
class BatchReport:
    """One micro-batch, as printed on its progress line."""

    batch_id: int
    records: int
    """Deliveries: records handed to the processing, retries (fast ones too) included."""
    ok: int
    """Records acked by this batch (fan-out: trees completed)."""
    failed: int
    """Records failed by this batch (they are retried or dead-lettered)."""
    retried: int
    """Records in this batch that were retries (attempt > 1)."""
    dead_lettered: int
    """Records dead-lettered while this batch was applied."""
    in_flight: int
    pending_trees: int
    millis_behind_latest: int | None
    """The largest MillisBehindLatest over the shards (None: not known yet)."""
    checkpoint_age: float | None
    seconds: float
    """Wall time of the iteration: filling plus processing."""
    process_seconds: float = 0.0
    """Of which: Arrow conversion, Spark, sink writes, acks and fails."""
    splits: int = 0
    """Times the batch was split after a batch-level failure."""
    expired: int = 0
    """Of the dead-lettered: given up as older than ``max_record_age``."""

    @property
    def records_per_second(self) -> float:
        """Records done (acked or dead-lettered) per second of this iteration."""
        done = self.ok + self.dead_lettered
        return done / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        behind = "?" if self.millis_behind_latest is None else f"{self.millis_behind_latest}"
        age = "never" if self.checkpoint_age is None else f"{self.checkpoint_age:.1f}s"
        trees = f" trees pending {self.pending_trees} |" if self.pending_trees else ""
        split = f" (split {self.splits}x)" if self.splits else ""
        return (
            f"batch {self.batch_id}: {self.records} records{split} | ok {self.ok} | "
            f"failed {self.failed} | retried {self.retried} | "
            f"dead-lettered {self.dead_lettered}{_expired(self.expired)} | "
            f"in flight {self.in_flight} |{trees} "
            f"behind {behind} ms | checkpoint age {age} | "
            f"{self.records_per_second:,.0f} done records/s"
        )


@dataclass(frozen=True, slots=True)
class JobSummary:
    """What a whole run did."""

    batches: int
    records: int
    ok: int
    failed: int
    retried: int
    dead_lettered: int
    seconds: float
    """The whole run, idle waits included."""
    stopped_because: str
    busy_seconds: float = 0.0
    """Time spent in iterations that had records (filling and processing)."""
    expired: int = 0
    """Of the dead-lettered: given up as older than ``max_record_age``."""
    empty_batches: int = 0
    """Executor reads: micro-batch jobs that read nothing (polls of idle shards), not in
    ``batches``."""

    @property
    def done(self) -> int:
        """Records done: acked, or dead-lettered (retries are not extra records)."""
        return self.ok + self.dead_lettered

    @property
    def done_per_second(self) -> float:
        """Records done per second of processing time (idle waits excluded)."""
        return self.done / self.busy_seconds if self.busy_seconds > 0 else 0.0

    def line(self) -> str:
        return (
            f"stopped ({self.stopped_because}) after {self.batches} batches: "
            f"{self.done} done (ok {self.ok}, dead-lettered {self.dead_lettered}"
            f"{_expired(self.expired)}) | "
            f"{self.records} deliveries | failed {self.failed} | retried {self.retried} | "
            f"{self.seconds:.1f}s, of which {self.busy_seconds:.1f}s processing | "
            f"{self.done_per_second:,.1f} records done/s of processing"
            f"{_empty(self.empty_batches)}"
        )


def _empty(n: int) -> str:
    return f" | {n} more micro-batches read nothing" if n else ""


def _expired(n: int) -> str:
    return f", of which expired {n}" if n else ""


def print_progress(report: BatchReport) -> None:
    """The default progress callback: one line on stdout per micro-batch."""
    print(report.line(), file=sys.stdout, flush=True)


def _stat(stats: Any, name: str) -> Any:
    return getattr(stats, name, None)


def _max_behind(stats: Any) -> int | None:
    behind = _stat(stats, "millis_behind_latest")
    if isinstance(behind, Mapping):
        values = [v for v in behind.values() if v is not None]
        return int(max(values)) if values else None
    return int(behind) if isinstance(behind, int | float) else None


def batch_report(
    batch_id: int,
    before: Any,
    after: Any,
    *,
    records: int,
    ok: int,
    failed: int,
    retried: int,
    seconds: float,
    process_seconds: float,
    splits: int,
    in_flight: int = 0,
    pending_trees: int = 0,
) -> BatchReport:
    """A micro-batch's report (both loops): its own counts, what the spout's stats
    ``before`` and ``after`` it say changed (dead letters, expired records), and what
    they say now (in flight, lag, checkpoint age). ``in_flight``: when the stats have none."""

    def grew(name: str) -> int:
        return int((_stat(after, name) or 0) - (_stat(before, name) or 0))

    age = _stat(after, "checkpoint_age")
    return BatchReport(
        batch_id=batch_id,
        records=records,
        ok=ok,
        failed=failed,
        retried=retried,
        dead_lettered=grew("dead_lettered"),
        in_flight=int(_stat(after, "in_flight") or in_flight),
        pending_trees=pending_trees,
        millis_behind_latest=_max_behind(after),
        checkpoint_age=float(age) if age is not None else None,
        seconds=max(seconds, 1e-9),
        process_seconds=process_seconds,
        splits=splits,
        expired=grew("expired"),
    )


class RunLimits:
    """When a run stops by itself: ``max_batches`` reached, or idle for ``stop_when_idle``."""

    def __init__(self, config: SpoutConfig) -> None:
        self.max_batches = config.max_batches
        self.stop_when_idle = config.stop_when_idle
        self._idle_since: float | None = None
        self._troubled = False

    def at_batch_limit(self, batches: int) -> bool:
        return bool(self.max_batches) and batches >= self.max_batches

    def troubled(self) -> None:
        """A micro-batch failed, was split or given up: the job is not idle (a stall is
        never taken for a quiet stream)."""
        self._idle_since = None
        self._troubled = True

    def idle_stop_due(self, now: float, idle: bool) -> bool:
        """True once the job has been idle for ``stop_when_idle`` seconds in a row."""
        troubled, self._troubled = self._troubled, False
        if not self.stop_when_idle or not idle or troubled:
            self._idle_since = None
            return False
        if self._idle_since is None:
            self._idle_since = now
        return now - self._idle_since >= self.stop_when_idle

    def reason(
        self, batches: int, had_records: bool, idle: Callable[[], bool], now: float
    ) -> str | None:
        """Why the run stops after this iteration, or None."""
        if self.at_batch_limit(batches):
            return f"max_batches={self.max_batches} reached"
        if not had_records and self.idle_stop_due(now, idle()):
            return f"idle for {self.stop_when_idle:g}s"
        if had_records:
            self._idle_since = None
        return None


@dataclass(slots=True)
class RunTotals:
    """The counts of a run so far (for its :class:`JobSummary`)."""

    batches: int = 0
    records: int = 0
    ok: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    busy_seconds: float = 0.0
    expired: int = 0
    empty_batches: int = 0
    """Micro-batch jobs that read nothing (no progress line, not in ``batches``)."""

    def add(
        self,
        records: int,
        ok: int,
        failed: int,
        retried: int,
        dead: int,
        seconds: float,
        expired: int = 0,
    ) -> None:
        """One micro-batch's counts and the seconds it took."""
        self.batches += 1
        self.expired += expired
        self.records += records
        self.ok += ok
        self.failed += failed
        self.retried += retried
        self.dead_lettered += dead
        self.busy_seconds += seconds

    def add_report(self, r: BatchReport) -> None:
        """One micro-batch, from its report."""
        self.add(r.records, r.ok, r.failed, r.retried, r.dead_lettered, r.seconds, r.expired)

    def summary(self, seconds: float, stopped_because: str) -> JobSummary:
        return JobSummary(
            self.batches,
            self.records,
            self.ok,
            self.failed,
            self.retried,
            self.dead_lettered,
            seconds,
            stopped_because,
            busy_seconds=self.busy_seconds,
            expired=self.expired,
            empty_batches=self.empty_batches,
        )
