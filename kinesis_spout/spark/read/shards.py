"""Reading a shard inside a Spark read task, bounded by the plan.

:func:`read_shards` reads each plan from its position until its limit in *user*
records (a KPL aggregate past the limit is cut, and the position handed on is
inside it), the tip (an answer short of what was asked and not behind; an
empty page that is behind is a gap or old data and is read past), the end of a
closed shard, or ``read_seconds``: the bounded read every reading mode shares
(:mod:`kinesis_spout.kinesis.bounded`). Polling uses the same
:class:`~kinesis_spout.kinesis.getter.KinesisShardGetter` as driver reads
(throttling, 5xx and expired iterators retried with backoff inside the task);
with ``consumer = "efo"`` it subscribes instead (:mod:`kinesis_spout.kinesis.efo_read`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from kinesis_spout.errors import KinesisError
from kinesis_spout.kinesis.bounded import BoundedRead, Take, read_each, read_until
from kinesis_spout.kinesis.efo_read import EfoTarget, subscribed_getter
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.records import ReadEnd, Record, ShardBatch
from kinesis_spout.spark.process.arrow import format_error
from tracker import ExponentialBackoff, JitteredBackoff

if TYPE_CHECKING:
    from kinesis_spout.spark.read.plan import ReadPlan, ReadResult, ReadSettings

Read = tuple["ReadPlan", Callable[[list[Record]], None], "ReadResult"]
"""A read plan, what consumes its records page by page, and the result it fills."""


def read_shards(reads: list[Read], settings: ReadSettings) -> None:
    """Read every plan of a task until its limit or the end of its data, all of them
    within one deadline (:func:`read_each_shard`, waited out)."""
    for _ in read_each_shard(reads, settings):
        pass


def read_each_shard(reads: list[Read], settings: ReadSettings) -> Iterator[int]:
    """Read every plan of a task until its limit or the end of its data, all of them
    within one deadline (``read_seconds`` from now), each by
    :class:`~kinesis_spout.kinesis.bounded.BoundedRead`; yield the index of each read
    in ``reads`` once its end is in its result, as soon as it is done.

    Polled shards are read *interleaved* (:func:`~kinesis_spout.kinesis.bounded.read_each`):
    the one due first is polled next, so a throttled shard's backoff is spent polling the
    others, and an idle shard costs one GetRecords. Up to ``poll_threads`` calls are in
    flight at once (one per shard at most): a call's wait for the network and the server
    is spent on the other shards' calls, and so is the caller's handling of a read that
    is done (which counts against the deadline too). Subscribed shards
    (``consumer = "efo"``) are read one after the other first, each within what is
    left of the deadline."""
    deadline = time.monotonic() + settings.read_seconds
    polled: list[tuple[BoundedRead, ReadResult, int]] = []
    for i, (plan, consume, res) in enumerate(reads):
        assert plan.position is not None
        mine = settings.for_plan(plan)  # the plan's stream's (resolved: for_plan again is itself)
        if mine.consumer_arn is not None:
            left = max(deadline - time.monotonic(), 0.0)
            read_subscribed(plan, mine, consume, res, seconds=left)
            yield i
        else:
            read = BoundedRead(
                _polling_getter(plan, mine),
                plan.limit,
                _taker(res, consume),
                per_call=settings.records_per_call,
            )
            polled.append((read, res, i))
    for j, end in read_each([r for r, _, _ in polled], deadline, settings.poll_threads):
        _, res, i = polled[j]
        _end_into(res, end)
        yield i


def _taker(res: ReadResult, consume: Callable[[list[Record]], None]) -> Take:
    """A page into the result's figures and to the consumer; all of it is taken."""

    def take(batch: ShardBatch) -> int:
        _take_page(res, batch)
        consume(batch.records)
        return len(batch.records)

    return take


def _end_into(res: ReadResult, end: ReadEnd) -> None:
    """A read's end into its result: errors, call durations, position, lag."""
    for err in end.errors:
        _count_error(res, err)
    res.call_seconds.extend(end.seconds)
    res.caught_up = end.caught_up
    res.position = end.position
    res.ended = end.ended
    res.behind = end.behind
    res.calls = end.calls


def _polling_getter(plan: ReadPlan, settings: ReadSettings) -> KinesisShardGetter:
    """The task's GetRecords getter at the plan's position (retries inside the task)."""
    from kinesis_spout.kinesis.api import KinesisApi
    from kinesis_spout.kinesis.client import process_client

    pos = plan.position
    assert pos is not None
    settings = settings.for_plan(plan)
    return KinesisShardGetter(
        KinesisApi(
            process_client(
                settings.endpoint_url,
                settings.region,
                profile=settings.profile,
                role=settings.role,
            ),
            settings.stream_name,
            settings.stream_arn,
        ),
        plan.shard_id,
        backoff=JitteredBackoff(
            ExponentialBackoff(settings.throttle_backoff, cap=settings.throttle_backoff_max),
            random.Random(),
        ),
        start=pos.after,
        after_whole=pos.after_whole,
        iterator=pos.iterator,
        position=pos.initial,
        timestamp=pos.timestamp,
        limit=min(settings.records_per_call, max(plan.limit, 1)),
        max_calls_per_second=settings.max_calls_per_second,
        empty_shard_backoff=0.0,
    )


def read_subscribed(
    plan: ReadPlan,
    settings: ReadSettings,
    consume: Callable[[list[Record]], None],
    res: ReadResult,
    *,
    seconds: float | None = None,
) -> None:
    """Enhanced fan-out: subscribe at the plan's position and take events until its
    limit, the tip, the shard's end or ``seconds`` (``read_seconds`` by default)."""
    pos = plan.position
    settings = settings.for_plan(plan)
    assert pos is not None and settings.consumer_arn is not None
    target = EfoTarget(
        settings.stream_name,
        settings.region,
        settings.endpoint_url,
        settings.consumer_arn,
        settings.throttle_backoff,
        settings.throttle_backoff_max,
        settings.profile,
        settings.role,
    )
    getter = subscribed_getter(
        target,
        plan.shard_id,
        start=pos.after,
        after_whole=pos.after_whole,
        position=pos.initial,
        timestamp=pos.timestamp,
        limit=plan.limit,
        closed=plan.closed,
    )
    budget = settings.read_seconds if seconds is None else seconds
    _end_into(res, read_until(getter, plan.limit, budget, _taker(res, consume)))


def _count_error(res: ReadResult, err: KinesisError) -> None:
    from kinesis_spout.errors import ExpiredIteratorError, ResourceInUseError, ThrottledError

    res.last_error = format_error(err)
    if isinstance(err, ThrottledError | ResourceInUseError):
        res.throttled += 1
    elif isinstance(err, ExpiredIteratorError):
        res.expired += 1
    else:
        res.transient += 1


def _take_page(res: ReadResult, batch: ShardBatch) -> None:
    if batch.child_shards:
        res.child_shards = batch.child_shards
    if batch.aggregates:
        res.aggregates += batch.aggregates
    res.skipped += batch.skipped
    res.corrupt += batch.corrupt_aggregates
    if batch.skipped_tail is not None:
        res.skipped_tail = batch.skipped_tail
    elif batch.records:
        res.skipped_tail = None  # records came after it: they cover it
