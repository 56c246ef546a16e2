"""The streaming source's reads of one shard, on the executors: a first read and a replay.

An executor's first read of a batch's shard walks it from the batch start for at most
a quota of user records (:func:`first_read`), by GetRecords (:func:`read_fresh`) or by
enhanced fan-out (:func:`read_fresh_subscribed`), keeps the records and says where it
stopped; that end is recorded for the (batch, shard), first writer wins
(:mod:`~kinesis_spout.streaming.executor_read`). A task run again reads exactly the
recorded range by GetRecords (:func:`read_range`), with the same start, so the batch has
the same records on every replay as long as Kinesis retains them. Both are the one
bounded read of :mod:`kinesis_spout.kinesis.bounded` over a getter; both count user
records after KPL de-aggregation, and a cut inside an aggregate is kept in the position.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kinesis_spout.checkpoint.recorded_read import MAX_EMPTY_BEHIND, ShardRange, replay
from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.bounded import BoundedGetter, read_until
from kinesis_spout.kinesis.efo_read import EfoTarget, subscribed_getter
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.records import Record, ShardBatch, ShardPosition, StartPosition
from kinesis_spout.streaming.errors import data_loss
from tracker import Backoff, ExponentialBackoff

READ_SECONDS = 5.0
"""Longest a subscribed first read stays subscribed (Kinesis sends an event at least
every 5 s)."""


def polling_getter(
    api: KinesisApi,
    shard_id: str,
    after: ShardPosition | None,
    start: StartPosition,
    fetch: int,
    *,
    iterator: str | None = None,
    backoff: Backoff | None = None,
) -> KinesisShardGetter:
    """A GetRecords getter for one bounded read after ``after`` (or at ``start``),
    unthrottled (a read ends at its bounds, not on a rate).

    After a cut inside a KPL aggregate (``after.partial``) its iterator is *at* that
    sequence number, and the user records up to ``after`` are skipped by key.
    ``iterator``, when given, must continue exactly after ``after``."""
    key = after.key if after is not None else None
    return KinesisShardGetter(
        api,
        shard_id,
        backoff=backoff or ExponentialBackoff(0.2, cap=5.0),
        start=key,
        after_whole=None if key is None or after is None else not after.partial,
        position=start.kind,
        timestamp=start.timestamp,
        iterator=iterator,
        limit=max(1, fetch),
        max_calls_per_second=math.inf,
        empty_shard_backoff=0.0,
    )


@dataclass(frozen=True, slots=True)
class ReadAhead:
    """Where an executor's first read of a batch's shard stopped, in the streaming
    source's terms (:func:`first_read`): what its batch-end record
    (:class:`~kinesis_spout.checkpoint.batch_ends.BatchEnd`) is made of, and what a retry
    of the read and a read that goes on need.

    Not a copy of :class:`~kinesis_spout.records.ReadEnd` (how the bounded read under it
    ended) but what the first read makes of one: ``position`` is a
    :class:`~kinesis_spout.records.ShardPosition` of the records *kept* (an arrival
    cutoff may leave part of the getter's last page out; a cut inside a KPL aggregate is
    ``partial``), where the ReadEnd's is the getter's; ``idle`` counts the cutoff as the
    tip; ``error`` is the one error that cut the read short, not each one met;
    ``next_iterator`` is the getter's only when it goes on exactly after ``position``;
    ``children`` only once the shard ended. Nor a BatchEnd: that is the persisted record,
    with no error in it (``next_iterator`` is its ``iterator``, the next batch's start),
    and it adds when, by whom and from what plan.
    """

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


def read_fresh(
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
) -> tuple[list[Record], ReadAhead]:
    """At most ``quota`` user records of ``shard_id`` after ``after``, by GetRecords,
    and where the read stopped (see :func:`first_read`).

    ``iterator`` (optional) must continue exactly after ``after``; it is re-opened if
    expired. A retriable Kinesis error ends the read early and is returned, not
    raised: the caller backs off. At most ``max_calls`` GetRecords calls."""
    getter = polling_getter(api, shard_id, after, start, fetch, iterator=iterator)
    return first_read(
        getter,
        after,
        quota,
        cutoff=cutoff,
        per_call=fetch,
        stop_on_error=True,
        max_calls=max_calls,
        max_empty_behind=MAX_EMPTY_BEHIND,
    )


def first_read(
    getter: BoundedGetter,
    after: ShardPosition | None,
    quota: int,
    *,
    cutoff: datetime | None = None,
    seconds: float | None = None,
    **bounds: Any,
) -> tuple[list[Record], ReadAhead]:
    """An executor's first read of a batch's shard over ``getter`` (polling or
    subscribed): up to ``quota`` user records, the tip, the shard's end or the
    availableNow ``cutoff`` (records that arrived later are left out and the read
    stops there), within ``seconds``; the records it took and where it stopped."""
    kept: list[Record] = []
    inside = False  # the cutoff fell inside a KPL aggregate

    def take(batch: ShardBatch) -> int:
        nonlocal inside
        recs = batch.records
        n = _before(recs, cutoff)
        if n < len(recs):  # the cutoff: the read ends here (end.cut)
            inside = n > 0 and recs[n].sequence_number == recs[n - 1].sequence_number
            recs = recs[:n]
        kept.extend(recs)
        return n

    end = read_until(getter, quota, seconds, take, **bounds)
    assert end.position is not None
    partial = inside if end.cut else not end.position.after_whole
    last = kept[-1] if kept else None
    position = _position(after, last, len(kept), partial and last is not None, end.ended)
    error = end.errors[-1] if end.stopped_by_error or (end.errors and not end.events) else None
    stopped_there = end.cut or end.ended or end.stopped_by_error
    ahead = ReadAhead(
        getter.shard_id,
        position,
        end.cut or end.caught_up,
        None if stopped_there else end.position.iterator,
        error,
        tuple(c.shard_id for c in end.child_shards) if end.ended else (),
    )
    return kept, ahead


def _before(records: list[Record], cutoff: datetime | None) -> int:
    """How many of ``records`` arrived up to ``cutoff`` (all without one)."""
    if cutoff is not None:
        for i, r in enumerate(records):
            if r.approximate_arrival is not None and r.approximate_arrival > cutoff:
                return i
    return len(records)


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


def read_fresh_subscribed(
    target: EfoTarget,
    shard_id: str,
    after: ShardPosition | None,
    start: StartPosition,
    quota: int,
    *,
    cutoff: datetime | None = None,
    closed: bool = False,
    seconds: float = READ_SECONDS,
) -> tuple[list[Record], ReadAhead]:
    """At most ``quota`` user records of ``shard_id`` after ``after``, by subscription
    (``consumer=efo``): events until the quota, the tip (an event not behind, or nothing
    within ``seconds``), the shard's end or the cutoff (see :func:`first_read`)."""
    getter = subscribed_getter(
        target,
        shard_id,
        start=after.key if after is not None else None,
        after_whole=after is None or not after.partial,
        position=start.kind,
        timestamp=start.timestamp,
        limit=quota,
        closed=closed,
    )
    return first_read(getter, after, quota, cutoff=cutoff, seconds=seconds)


def read_range(
    api: KinesisApi,
    rng: ShardRange,
    *,
    fetch: int,
    fail_on_data_loss: bool = True,
    attempts: int = 8,
    backoff: Backoff | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    iterator: str | None = None,
) -> Iterator[list[Record]]:
    """The user records of ``rng``, page by page: exactly those of its first read, by
    GetRecords (:func:`~kinesis_spout.checkpoint.recorded_read.replay`). ``iterator``
    (optional) goes on right after ``rng.after``: the one the first read started from,
    so a replay soon after it does not walk again the empty pages before the range (an
    expired one is re-opened at ``rng.after``).

    Throttling and 5xx answers are retried with ``backoff``, up to ``attempts`` in a
    row (then raised). A range whose records expired raises :class:`DataLossError`
    (or logs, with ``fail_on_data_loss=False``)."""
    getter = polling_getter(
        api, rng.shard_id, rng.after, rng.start, fetch, iterator=iterator, backoff=backoff
    )
    pages, _ = replay(
        getter,
        rng,
        stream=api.stream_name,
        per_call=fetch,
        on_loss=lambda msg: data_loss(msg, fail_on_data_loss),
        max_errors=attempts,
        clock=clock,
        sleep=sleep,
    )
    yield from pages
