"""Reads whose range is recorded, so that every attempt of a task returns the same records.

Spark may run a read task more than once (a retry after a lost executor, a speculative
copy, a partition computed again). So a task reads its shard once and, before it
returns any record, records where the read stopped in the batch-end records
(:mod:`~kinesis_spout.checkpoint.batch_ends`) under its key: the run, the batch (the
streaming source's batch id, the Spark job's number) and the shard. The first writer
wins. An attempt that finds another range recorded reads that range again instead
(:func:`replay`): from the same start, exactly the recorded count of user records,
checked against the recorded last key. A record made for another plan is refused; an
attempt of a batch whose records were removed (committed: a leftover) fails before it
reads. The Spark job and the streaming source differ only in what they pass: the key,
the first read (polled, subscribed, several shards interleaved) and a replay's getter.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kinesis_spout.checkpoint.batch_ends import (
    BatchEnd,
    BatchEndStore,
    PlannedFrom,
    check_planned,
    removed_error,
)
from kinesis_spout.errors import DataLossError
from kinesis_spout.kinesis.bounded import BoundedGetter, read_until
from kinesis_spout.records import ReadEnd, Record, ShardBatch, ShardPosition, StartPosition
from tracker import SequenceKey

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_EMPTY_AT_TIP = 20
"""Empty answers in a row, at the tip, after which a replay short of its end gives up."""
MAX_EMPTY_BEHIND = 500
"""Empty answers in a row while behind (Kinesis walks over a gap one page at a time)."""
MAX_ERRORS = 8
"""Errors in a row (throttling, 5xx, expired iterators) after which a replay raises."""


@dataclass(frozen=True, slots=True)
class RecordedAt:
    """Where one read's end is recorded: a stream's batch-end records, the read's key in
    them (run, batch, shard) and what the read was planned from."""

    store: BatchEndStore
    run: str
    batch: int
    """The streaming source's batch id, or the number of the Spark job of the plans."""
    shard_id: str
    planned: PlannedFrom

    @property
    def where(self) -> str:
        return self.store.where(self.run, self.batch, self.shard_id)

    def check_kept(self) -> None:
        """Raise :class:`~.batch_ends.BatchEndError` if the batch's records were removed
        (committed): this attempt is a leftover and must record nothing."""
        floor = self.store.floor(self.run)
        if self.batch < floor:
            raise removed_error(self.where, self.batch, floor)

    def recorded(self) -> BatchEnd | None:
        """The end another attempt recorded, if any (one of another plan: an error)."""
        end = self.store.get(self.run, self.batch, self.shard_id)
        if end is not None:
            check_planned(end, self.planned, self.where)
        return end

    def record(self, end: BatchEnd) -> BatchEnd:
        """Record ``end`` unless an end is recorded already; the recorded one."""
        recorded = self.store.record(self.run, self.batch, self.shard_id, end)
        check_planned(recorded, self.planned, self.where)
        return recorded

    def range_of(self, recorded: BatchEnd) -> ShardRange | None:
        """The range ``recorded`` says the read took (None: no record)."""
        if recorded.position is None or recorded.count == 0:
            return None
        after = self.planned.after
        if after is not None and not after.sequence:
            after = None
        return ShardRange(self.shard_id, after, self.planned.start, recorded.position)


@dataclass(frozen=True, slots=True)
class ShardRange:
    """The part of one shard a recorded read took: after ``after`` (or from ``start``
    when ``None``) up to and including ``last``, ``last.count`` user records."""

    shard_id: str
    after: ShardPosition | None
    start: StartPosition
    last: ShardPosition

    @property
    def after_key(self) -> SequenceKey | None:
        return self.after.key if self.after is not None else None

    @property
    def last_key(self) -> SequenceKey:
        key = self.last.key
        assert key is not None  # a range is built only when it reads something
        return key


def read_once(
    at: RecordedAt, first: Callable[[], tuple[T, BatchEnd]], again: Callable[[BatchEnd], T]
) -> T:
    """A task's read of one shard: ``first()`` (the records and the end it records)
    unless another attempt recorded an end; then, or if another attempt records first,
    ``again(recorded)``, the recorded range read again (see the module docstring)."""
    at.check_kept()
    recorded = at.recorded()
    if recorded is not None:
        return again(recorded)
    kept, mine = first()
    return settle(at, kept, mine, again)


def settle(at: RecordedAt, kept: T, mine: BatchEnd, again: Callable[[BatchEnd], T]) -> T:
    """Record ``mine``, the end of the read that got ``kept`` (first writer wins):
    ``kept`` if the recorded range is that read's, else ``again(recorded)``."""
    recorded = at.record(mine)
    if recorded.count == mine.count and _last(recorded) == _last(mine):
        return kept  # recorded by this attempt, or by one that read the same
    log.info(
        "batch %d, %s: another attempt recorded its end first (%s records); returning that range",
        at.batch,
        at.shard_id,
        recorded.count,
    )
    return again(recorded)


def _last(end: BatchEnd) -> SequenceKey | None:
    return end.position.key if end.position is not None else None


def replay(
    getter: BoundedGetter,
    rng: ShardRange,
    *,
    stream: str,
    per_call: int | None = None,
    seconds: float | None = None,
    on_loss: Callable[[str], None] | None = None,
    max_errors: int = MAX_ERRORS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[list[list[Record]], ReadEnd]:
    """The user records of ``rng``, page by page, and how the read ended: exactly those
    of the read that recorded it, read with ``getter`` (opened after ``rng.after``, or
    at ``rng.start``) within ``seconds`` (None: no deadline).

    A range that cannot be read whole (its records expired, the stream was re-created)
    is said to ``on_loss`` (None: :class:`DataLossError` is raised)."""
    last_key, expected = rng.last_key, rng.last.count
    pages: list[list[Record]] = []

    def take(batch: ShardBatch) -> int:
        page = batch.records
        n = len(page)
        if page and page[-1].key > last_key:  # beyond the recorded end: clip, stop
            n = bisect.bisect_right([r.key for r in page], last_key)
        if n:
            pages.append(page[:n])
        return n

    end = read_until(
        getter,
        expected,
        seconds,
        take,
        clock=clock,
        sleep=sleep,
        per_call=per_call,
        to_tip=False,
        max_errors=max_errors,
        max_empty_at_tip=MAX_EMPTY_AT_TIP,
        max_empty_behind=MAX_EMPTY_BEHIND,
    )
    reached = end.last == last_key
    if not reached or end.taken != expected:
        msg = (
            f"{stream}/{rng.shard_id}: the batch planned {expected} records after "
            f"{rng.after_key or rng.start.kind.value} up to {last_key}, but Kinesis "
            f"returned {end.taken}{' and stopped before the end' if not reached else ''}: "
            "records expired (retention) or the stream was re-created"
        )
        if on_loss is None:
            raise DataLossError(msg)
        on_loss(msg)
    return pages, end
