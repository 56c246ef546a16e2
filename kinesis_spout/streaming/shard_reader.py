"""Kinesis reads of the streaming source: read-ahead (offset side) and range replay (executors).

The offset process decides where a batch ends by reading ahead
(:func:`read_ahead`): it walks each shard from the batch start for at most
a quota of user records and records the last key it saw. An executor then
reads exactly that range again (:func:`read_range`), using the same start
and the same filter, so the batch has the same records on every replay as
long as Kinesis retains them. Both sides count user records after KPL
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
from kinesis_spout.records import Record
from kinesis_spout.streaming.errors import DataLossError
from kinesis_spout.streaming.offsets import ShardPosition, ShardRange, StartPosition
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
    after_key = after.key if after is not None else None
    taken = 0
    last: Record | None = None
    partial = ended = idle = False
    next_it: str | None = None
    error: KinesisSpoutError | None = None
    calls = empty = 0
    try:
        it = iterator or open_iterator(api, shard_id, after, start)
        while True:
            asked = max(1, min(fetch, quota - taken))
            try:
                res = api.get_records(shard_id, it, asked)
            except ExpiredIteratorError:
                if calls or iterator is None:
                    raise
                it = open_iterator(api, shard_id, after, start)  # a cached iterator expired
                res = api.get_records(shard_id, it, asked)
            calls += 1
            recs = _after(res.records, after_key)
            stop_at_cutoff = False
            if cutoff is not None:
                for i, r in enumerate(recs):
                    if r.approximate_arrival is not None and r.approximate_arrival > cutoff:
                        recs, stop_at_cutoff = recs[:i], True
                        break
            take = recs[: quota - taken]
            if take:
                last = take[-1]
                taken += len(take)
            if len(take) < len(recs):  # quota reached inside this page
                partial = recs[len(take)].sequence_number == take[-1].sequence_number
                break
            if stop_at_cutoff:
                idle = True
                break
            if res.next_iterator is None:
                ended = True
                break
            it = res.next_iterator
            if taken >= quota or calls >= max_calls:
                next_it = it
                break
            behind = res.millis_behind_latest
            if res.raw_count == 0:
                if not behind:  # an empty page at the tip
                    idle, next_it = True, it
                    break
                empty += 1  # Kinesis walks over gaps one empty page at a time
                if empty >= MAX_EMPTY_BEHIND:
                    next_it = it
                    break
                continue
            empty = 0
            if behind == 0 and res.raw_count < asked:
                idle, next_it = True, it  # a short page with nothing behind: the tip
                break
    except KinesisSpoutError as exc:
        if not exc.retriable:
            raise
        # Errors come between pages, and pages hold whole Kinesis records: the
        # position of ``last`` is exact and not inside an aggregate.
        log.info("read-ahead of %s/%s cut short: %s", api.stream_name, shard_id, exc)
        error, next_it, partial = exc, None, False
    return ReadAhead(shard_id, _position(after, last, taken, partial, ended), idle, next_it, error)


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
    """The user records of ``rng``, page by page: exactly those read ahead.

    Raises :class:`DataLossError` (or logs, with ``fail_on_data_loss=False``)
    when the range cannot be read as planned: its records expired.
    """
    backoff = backoff or ExponentialBackoff(0.2, cap=5.0)
    shard = rng.shard_id
    what = f"{api.stream_name}/{shard}"
    last_key = rng.last_key
    after_key = rng.after_key
    expected = rng.last.count
    count = 0
    empty = 0
    calls = 0
    reached = beyond = False

    def reopen() -> str:
        if after_key is not None and count:
            # Resume at the last returned record; its earlier user records are skipped by key.
            pos = ShardPosition(str(after_key.sequence), after_key.sub_sequence, partial=True)
            return open_iterator(api, shard, pos, rng.start)
        return open_iterator(api, shard, rng.after, rng.start)

    retry: dict[str, Any] = {"attempts": attempts, "backoff": backoff, "sleep": sleep}
    it: str | None = _retrying(f"GetShardIterator {what}", reopen, **retry)
    while it is not None:
        current = it
        limit = max(1, min(fetch, expected - count))
        try:
            res = _retrying(
                f"GetRecords {what}",
                functools.partial(api.get_records, shard, current, limit),
                **retry,
            )
        except ExpiredIteratorError:
            it = _retrying(f"GetShardIterator {what}", reopen, **retry)
            continue
        calls += 1
        page = _after(res.records, after_key)
        if page and page[-1].key > last_key:
            beyond = True
            page = [r for r in page if r.key <= last_key]
        if page:
            count += len(page)
            after_key = page[-1].key
            yield page
        reached = after_key == last_key
        if reached or beyond:
            break
        it = res.next_iterator
        if res.raw_count == 0:
            empty += 1
            at_tip = not res.millis_behind_latest
            if empty >= (MAX_EMPTY_AT_TIP if at_tip else MAX_EMPTY_BEHIND):
                break
        else:
            empty = 0
    if not reached or count != expected:
        msg = (
            f"{what}: the batch planned {expected} records after "
            f"{rng.after_key or rng.start.kind.value} up to {last_key}, but Kinesis returned "
            f"{count}{' and stopped before the end' if not reached else ''}: records expired "
            "(retention) or the stream was re-created"
        )
        if fail_on_data_loss:
            raise DataLossError(msg + "; set failOnDataLoss=false to go on without them")
        log.warning("%s (failOnDataLoss=false: going on)", msg)
