"""Reading the one record a read task of limit 1 failed on, on the driver.

Its Python worker died on it, or the function hung on it, so no task returned its
position: the driver reads it here (GetRecords of limit 1), on a thread of its own
(:meth:`~kinesis_spout.spark.read.lone.LoneRecords.walk`), to fail it in its tracker. The plan's
iterator may have expired long ago (a halving cycle can outlast the 5 minutes
of an iterator), and a call may be throttled or fail: :func:`read_alone` is the
bounded read of :mod:`kinesis_spout.kinesis.bounded` with a limit of one record,
re-opening the iterator after the last key read when it expired, and backing off
after throttling and 5xx answers, up to :data:`ATTEMPTS` errors in a row.

The record may sit behind empty pages (Kinesis walks a gap in time, over old and
sparse data, one empty page at a time), which the task walked too: the read walks
up to :data:`MAX_EMPTY_BEHIND` of them, within :data:`SECONDS`, so a longer gap is
walked over several reads: :func:`keep_reached` keeps the iterator the read reached as
the shard's position (nothing lies between), and the planner reads on from there, with
no task of the shard meanwhile (:meth:`~kinesis_spout.spark.read.planner.ExecutorReadPlanner.walk`:
those reads run on a thread of their own), while that iterator is still valid (5 minutes).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kinesis_spout.errors import KinesisError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.bounded import read_until
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.records import ShardBatch
from kinesis_spout.spark.read.plan import ReadPlan
from tracker import Backoff

ATTEMPTS = 5
"""Errors in a row before giving up for this read (the next step reads on)."""

MAX_EMPTY_BEHIND = 50
"""Empty pages behind the tip walked in one read (10 s at 5 calls a second)."""

SECONDS = 15.0
"""The most one read takes (on a thread of its own: the micro-batch loop does not wait
for it): calls are not started past it, so throttling and backoff cannot stretch it."""


def read_alone(
    api: KinesisApi,
    plan: ReadPlan,
    backoff: Backoff,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    stopped: Callable[[], bool] | None = None,
) -> tuple[KinesisShardGetter, ShardBatch]:
    """The getter and its last poll: the record at ``plan.position`` if it could be read
    (else the batch holds no record, and its ``error`` says why); ``stopped()``, asked
    before each call, ends the read early."""
    pos = plan.position
    assert pos is not None
    getter = KinesisShardGetter(
        api,
        plan.shard_id,
        backoff=backoff,
        start=pos.after,
        after_whole=pos.after_whole,
        iterator=pos.iterator,
        position=pos.initial,
        timestamp=pos.timestamp,
        limit=1,
        empty_shard_backoff=0.0,
    )
    pages: list[ShardBatch] = []

    def take(batch: ShardBatch) -> int:
        pages.append(batch)
        return len(batch.records)

    try:
        end = read_until(
            getter,
            1,
            SECONDS,
            take,
            clock=clock,
            sleep=sleep,
            stopped=stopped,
            per_call=1,
            max_empty_behind=MAX_EMPTY_BEHIND,
            max_errors=ATTEMPTS,
        )
    except KinesisError as exc:
        if not exc.retriable:
            raise
        return getter, ShardBatch([], 0.0, error=exc)  # throttled or failing ATTEMPTS times
    if pages and (pages[-1].records or pages[-1].ended):
        return getter, pages[-1]
    return getter, ShardBatch([], 0.0, error=end.errors[-1] if end.errors else None)


def keep_reached(shard: KinesisShardGetter, plan: ReadPlan, read: KinesisShardGetter) -> None:
    """:func:`read_alone` (its getter ``read``) did not get the record: the shard's
    position (``shard``, while still the plan's) takes the iterator the read reached (over
    empty pages: the next read goes on from there), or, with none, drops an iterator that
    expired (its next task re-opens after the last key).

    The read stops at its first user record, so it passed none: only empty pages and KPL
    aggregates that hold no user record, whose keys may have moved its last key
    (``after``). Nothing the tracker needs lies between, so that key is kept too: a gap
    with such an aggregate inside is walked on, not walked again from its start."""
    assert plan.position is not None
    if shard.position != plan.position:
        return
    reached = read.position
    if reached.iterator is not None:
        shard.advance(
            reached,
            ended=False,
            behind=read.millis_behind_latest,
            caught_up=False,
            next_poll_at=shard.next_poll_at,
        )
    elif read.expired_iterators:
        shard.drop_iterator()
