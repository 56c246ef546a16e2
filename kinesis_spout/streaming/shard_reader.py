"""Kinesis reads of the streaming source, on the executors: a fresh read and a range replay.

An executor's first read of a batch's shard (:func:`read_fresh`) walks the shard
from the batch start for at most a quota of user records, keeps them and says
where it stopped; that end is recorded for the (batch, shard), first writer
wins. A task run again reads exactly the recorded range (:func:`read_range`),
with the same start and the same filter, so the batch has the same records on
every replay as long as Kinesis retains them. :func:`read_ahead` is the same
walk without keeping the records. Both sides count user records after KPL
de-aggregation, and a cut inside an aggregate is kept in the position.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from kinesis_spout.errors import ExpiredIteratorError, KinesisSpoutError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.positions import ShardPosition, StartPosition
from kinesis_spout.records import Record
from kinesis_spout.streaming.errors import DataLossError
from kinesis_spout.streaming.offsets import ShardRange
from tracker import ExponentialBackoff, SequenceKey

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Empty GetRecords answers in a row, at the tip (MillisBehindLatest 0), after
#: which a replay that has not reached its planned end gives up: the records are gone.
MAX_EMPTY_AT_TIP = 20
#: Empty answers in a row while behind (Kinesis skips gaps one page at a time).
MAX_EMPTY_BEHIND = 500


def open_iterator(
    api: KinesisApi, shard_id: str, after: ShardPosition | None, start: StartPosition
) -> str:
    """An iterator at the first record after ``after`` (or at ``start``).

    After a cut inside a KPL aggregate the iterator is *at* its sequence
    number; the caller skips the user records up to ``after`` by key.
    """
    if after is not None and after.sequence is not None:
        if after.partial:
            return api.shard_iterator(shard_id, at_sequence=after.sequence)
        return api.shard_iterator(shard_id, after_sequence=after.sequence)
    return api.shard_iterator(shard_id, position=start.kind, timestamp=start.timestamp)


@dataclass(frozen=True, slots=True)
class ReadAhead:
    """What one read-ahead learned about one shard."""

    shard_id: str
    position: ShardPosition | None
    """The new position, or ``None``: nothing new and the shard did not end."""
    idle: bool
    """The read reached the shard's tip (or the availableNow cutoff)."""
    next_iterator: str | None
    """Continues right after ``position`` (``None``: re-open next time)."""
    error: KinesisSpoutError | None = None
    """A retriable error that cut this read short (the position is still exact)."""
    children: tuple[str, ...] = ()
    """The shard ended: the child shards its last page named."""


def read_ahead(
    api: KinesisApi,
    shard_id: str,
    after: ShardPosition | None,
    start: StartPosition,
    quota: int,
    *,
    fetch: int,
    iterator: str | None = None,
    cutoff: datetime | None = None,
    max_calls: int = 50,
) -> ReadAhead:
    """Read at most ``quota`` user records of ``shard_id`` after ``after``.

    ``iterator`` (optional) must continue exactly after ``after``; it is
    re-opened if expired. ``cutoff``: records that arrived later are left out
    and the read stops there (Trigger.AvailableNow). Retriable Kinesis errors
    end the read early and are returned, not raised: the caller backs off.
    """
    return _ahead(_AheadRead(api, shard_id, after, start, quota, fetch, cutoff, max_calls),
                  iterator)  # fmt: skip


def read_fresh(
    api: KinesisApi,
    shard_id: str,
    after: ShardPosition | None,
    start: StartPosition,
    quota: int,
    *,
    fetch: int,
    cutoff: datetime | None = None,
    max_calls: int = 50,
) -> tuple[list[Record], ReadAhead]:
    """:func:`read_ahead` that also keeps the records it took (an executor's first
    read of a batch's shard: the records are read once)."""
    read = _AheadRead(api, shard_id, after, start, quota, fetch, cutoff, max_calls)
    read.kept = []
    result = _ahead(read, None)
    return read.kept, result


def _ahead(read: _AheadRead, iterator: str | None) -> ReadAhead:
    api, shard_id, after, start = read.api, read.shard_id, read.after, read.start
    error: KinesisSpoutError | None = None
    try:
        it: str | None = iterator or open_iterator(api, shard_id, after, start)
        while it is not None:
            it = read.step(it, cached=iterator is not None)
    except KinesisSpoutError as exc:
        if not exc.retriable:
            raise
        # Errors come between pages, and pages hold whole Kinesis records: the
        # position of ``last`` is exact and not inside an aggregate.
        log.info("read-ahead of %s/%s cut short: %s", api.stream_name, shard_id, exc)
        error, read.next_it, read.partial = exc, None, False
    position = _position(after, read.last, read.taken, read.partial, read.ended)
    return ReadAhead(shard_id, position, read.idle, read.next_it, error, read.children)


class _AheadRead:
    """The state of one :func:`read_ahead`: what was taken and how the read ended."""

    def __init__(
        self,
        api: KinesisApi,
        shard_id: str,
        after: ShardPosition | None,
        start: StartPosition,
        quota: int,
        fetch: int,
        cutoff: datetime | None,
        max_calls: int,
    ) -> None:
        self.api, self.shard_id, self.after, self.start = api, shard_id, after, start
        self.quota, self.fetch, self.cutoff, self.max_calls = quota, fetch, cutoff, max_calls
        self.after_key = after.key if after is not None else None
        self.taken = self.calls = self.empty = 0
        self.last: Record | None = None
        self.partial = self.ended = self.idle = False
        self.next_it: str | None = None
        self.kept: list[Record] | None = None
        """The records taken, when the caller keeps them."""
        self.children: tuple[str, ...] = ()

    def step(self, it: str, *, cached: bool) -> str | None:
        """Read one page at ``it``; the iterator to go on with, or ``None``: done."""
        asked = max(1, min(self.fetch, self.quota - self.taken))
        try:
            res = self.api.get_records(self.shard_id, it, asked)
        except ExpiredIteratorError:
            if self.calls or not cached:
                raise
            it = open_iterator(self.api, self.shard_id, self.after, self.start)  # cache expired
            res = self.api.get_records(self.shard_id, it, asked)
        self.calls += 1
        recs, stop_at_cutoff = self._before_cutoff(_after(res.records, self.after_key))
        take = recs[: self.quota - self.taken]
        if take:
            self.last = take[-1]
            self.taken += len(take)
            if self.kept is not None:
                self.kept.extend(take)
        if len(take) < len(recs):  # quota reached inside this page
            self.partial = recs[len(take)].sequence_number == take[-1].sequence_number
            return None
        if stop_at_cutoff:
            self.idle = True
            return None
        if res.next_iterator is None:
            self.ended = True
            self.children = tuple(c.shard_id for c in res.child_shards)
            return None
        return self._next(res.next_iterator, res.raw_count, res.millis_behind_latest, asked)

    def _next(self, it: str, raw_count: int, behind: int | None, asked: int) -> str | None:
        """After a page that did not end the read: go on at ``it``, or stop there."""
        if self.taken >= self.quota or self.calls >= self.max_calls:
            self.next_it = it
            return None
        if raw_count == 0:
            if not behind:  # an empty page at the tip
                self.idle, self.next_it = True, it
                return None
            self.empty += 1  # Kinesis walks over gaps one empty page at a time
            if self.empty >= MAX_EMPTY_BEHIND:
                self.next_it = it
                return None
            return it
        self.empty = 0
        if behind == 0 and raw_count < asked:
            self.idle, self.next_it = True, it  # a short page with nothing behind: the tip
            return None
        return it

    def _before_cutoff(self, recs: list[Record]) -> tuple[list[Record], bool]:
        """The records that arrived up to the cutoff, and whether one arrived later."""
        if self.cutoff is not None:
            for i, r in enumerate(recs):
                if r.approximate_arrival is not None and r.approximate_arrival > self.cutoff:
                    return recs[:i], True
        return recs, False


def _position(
    after: ShardPosition | None, last: Record | None, taken: int, partial: bool, ended: bool
) -> ShardPosition | None:
    if last is not None:
        return ShardPosition(
            last.sequence_number, last.sub_sequence_number, partial and not ended, ended, taken
        )
    if not ended:
        return None
    if after is not None:  # closed with nothing new: keep the last key, mark ended
        return ShardPosition(after.sequence, after.sub_sequence, False, True, 0)
    return ShardPosition(None, 0, False, True, 0)


def _after(records: list[Record], after_key: SequenceKey | None) -> list[Record]:
    if after_key is None or not records or records[0].key > after_key:
        return records
    return [r for r in records if r.key > after_key]


# --- executors ---------------------------------------------------------------------------


def _retrying(
    what: str,
    fn: Callable[[], T],
    *,
    attempts: int,
    backoff: ExponentialBackoff,
    sleep: Callable[[float], None],
) -> T:
    """``fn()``, retried on retriable errors with backoff (executor tasks may block;
    in local mode Spark does not retry a failed task)."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except KinesisSpoutError as exc:
            if not exc.retriable or isinstance(exc, ExpiredIteratorError) or attempt == attempts:
                raise
            delay = backoff.delay(attempt)
            log.info("%s: %s; retry %d in %.2fs", what, exc, attempt, delay)
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def read_range(
    api: KinesisApi,
    rng: ShardRange,
    *,
    fetch: int,
    fail_on_data_loss: bool = True,
    attempts: int = 8,
    backoff: ExponentialBackoff | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[list[Record]]:
    """The user records of ``rng``, page by page: exactly those of its first read.

    Raises :class:`DataLossError` (or logs, with ``fail_on_data_loss=False``)
    when the range cannot be read as planned: its records expired.
    """
    retry: dict[str, Any] = {
        "attempts": attempts,
        "backoff": backoff or ExponentialBackoff(0.2, cap=5.0),
        "sleep": sleep,
    }
    read = _RangeRead(api, rng, fetch, retry)
    yield from read.pages()
    read.check(fail_on_data_loss)


class _RangeRead:
    """The state of one :func:`read_range`: user records returned and where it stopped."""

    def __init__(self, api: KinesisApi, rng: ShardRange, fetch: int, retry: dict[str, Any]):
        self.api, self.rng, self.fetch, self.retry = api, rng, fetch, retry
        self.what = f"{api.stream_name}/{rng.shard_id}"
        self.after_key = rng.after_key
        self.count = self.empty = 0
        self.reached = self.beyond = False

    def _reopen(self) -> str:
        shard, start = self.rng.shard_id, self.rng.start
        if self.after_key is not None and self.count:
            # Resume at the last returned record; its earlier user records are skipped by key.
            key = self.after_key
            pos = ShardPosition(str(key.sequence), key.sub_sequence, partial=True)
            return open_iterator(self.api, shard, pos, start)
        return open_iterator(self.api, shard, self.rng.after, start)

    def _open(self) -> str:
        return _retrying(f"GetShardIterator {self.what}", self._reopen, **self.retry)

    def pages(self) -> Iterator[list[Record]]:
        """The pages of the range, clipped to its planned end."""
        last_key, expected = self.rng.last_key, self.rng.last.count
        it: str | None = self._open()
        while it is not None:
            limit = max(1, min(self.fetch, expected - self.count))
            get = functools.partial(self.api.get_records, self.rng.shard_id, it, limit)
            try:
                res = _retrying(f"GetRecords {self.what}", get, **self.retry)
            except ExpiredIteratorError:
                it = self._open()
                continue
            page = _after(res.records, self.after_key)
            if page and page[-1].key > last_key:
                self.beyond = True
                page = [r for r in page if r.key <= last_key]
            if page:
                self.count += len(page)
                self.after_key = page[-1].key
                yield page
            self.reached = self.after_key == last_key
            if (
                self.reached
                or self.beyond
                or self._gave_up(res.raw_count, res.millis_behind_latest)
            ):
                break
            it = res.next_iterator

    def _gave_up(self, raw_count: int, behind: int | None) -> bool:
        """Too many empty answers in a row: the planned records are gone."""
        if raw_count:
            self.empty = 0
            return False
        self.empty += 1
        return self.empty >= (MAX_EMPTY_AT_TIP if not behind else MAX_EMPTY_BEHIND)

    def check(self, fail_on_data_loss: bool) -> None:
        """Raise :class:`DataLossError` (or log) unless the whole range was read."""
        rng, expected = self.rng, self.rng.last.count
        if self.reached and self.count == expected:
            return
        msg = (
            f"{self.what}: the batch planned {expected} records after "
            f"{rng.after_key or rng.start.kind.value} up to {rng.last_key}, but Kinesis "
            f"returned {self.count}{' and stopped before the end' if not self.reached else ''}: "
            "records expired (retention) or the stream was re-created"
        )
        if fail_on_data_loss:
            raise DataLossError(msg + "; set failOnDataLoss=false to go on without them")
        log.warning("%s (failOnDataLoss=false: going on)", msg)
