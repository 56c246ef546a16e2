"""Reading a shard inside a Spark read task, bounded by the plan.

:func:`read_shard` reads from the plan's position until its limit in *user*
records (a KPL aggregate past the limit is cut, and the position handed on is
inside it), the tip (an answer short of what was asked and not behind; an
empty page that is behind is a gap or old data and is read past), the end of a
closed shard, or ``read_seconds``. Polling uses the same
:class:`~kinesis_spout.kinesis.getter.KinesisShardGetter` as driver reads
(throttling, 5xx and expired iterators retried with backoff inside the task);
with ``consumer = "efo"`` it subscribes instead (:mod:`kinesis_spout.kinesis.efo_read`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kinesis_spout.kinesis.efo_read import EfoTarget, read_until, subscribed_getter
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.records import Record, ShardBatch
from kinesis_spout.spark.arrow import format_error
from tracker import ExponentialBackoff, JitteredBackoff

if TYPE_CHECKING:
    from kinesis_spout.spark.readtask import ReadPlan, ReadResult, ReadSettings

_CLIENTS: dict[tuple[str | None, str, str | None], Any] = {}
"""boto3 clients of this executor process, per (endpoint, region)."""


def _client(settings: ReadSettings) -> Any:
    from kinesis_spout.kinesis.client import make_client

    k = (settings.endpoint_url, settings.region, settings.profile)
    client = _CLIENTS.get(k)
    if client is None:
        client = _CLIENTS[k] = make_client(
            settings.endpoint_url, settings.region, profile=settings.profile
        )
    return client


def read_shard(
    plan: ReadPlan,
    settings: ReadSettings,
    consume: Callable[[list[Record]], None],
    res: ReadResult,
) -> None:
    """GetRecords from the plan's position until its limit or the end of the data."""
    assert plan.position is not None
    if settings.consumer_arn is not None:
        read_subscribed(plan, settings, consume, res)
        return
    getter = _polling_getter(plan, settings)
    deadline = time.monotonic() + settings.read_seconds
    remaining = plan.limit
    while remaining > 0 and not getter.ended:
        now = time.monotonic()
        if now < getter.next_poll_at:
            if getter.next_poll_at > deadline:
                break
            time.sleep(getter.next_poll_at - now)
            now = time.monotonic()
        asked = getter.limit = min(settings.records_per_call, remaining)
        batch = getter.poll(now)
        if batch.seconds is not None:
            res.call_seconds.append(batch.seconds)
        if batch.error is not None:
            _count_error(res, batch)
            if time.monotonic() >= deadline:
                break
            continue
        if len(batch.records) > remaining:  # a KPL aggregate past the limit: keep the bound
            batch = getter.cut(batch, remaining)
        _take_page(res, batch)
        consume(batch.records)
        got = len(batch.records)
        remaining -= got
        # The tip, by the getter's rule: an answer short of what was asked and not behind
        # (an empty page that is behind is a gap or old data: read on).
        res.caught_up = got < asked and not batch.millis_behind_latest
        if batch.ended or res.caught_up:
            break
    res.position = getter.position
    res.ended = getter.ended
    res.behind = getter.millis_behind_latest
    res.calls = getter.calls


def _polling_getter(plan: ReadPlan, settings: ReadSettings) -> KinesisShardGetter:
    """The task's GetRecords getter at the plan's position (retries inside the task)."""
    from kinesis_spout.kinesis.api import KinesisApi

    pos = plan.position
    assert pos is not None
    return KinesisShardGetter(
        KinesisApi(_client(settings), settings.stream_name),
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
) -> None:
    """Enhanced fan-out: subscribe at the plan's position and take events until its
    limit, the tip, the shard's end or ``read_seconds``."""
    pos = plan.position
    assert pos is not None and settings.consumer_arn is not None
    target = EfoTarget(
        settings.stream_name,
        settings.region,
        settings.endpoint_url,
        settings.consumer_arn,
        settings.throttle_backoff,
        settings.throttle_backoff_max,
        settings.profile,
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

    def take(batch: ShardBatch) -> int:
        _take_page(res, batch)
        consume(batch.records)
        return len(batch.records)

    end = read_until(getter, plan.limit, settings.read_seconds, take)
    for err in end.errors:
        _count_error(res, ShardBatch([], 0.0, error=err))
    res.caught_up = end.caught_up
    res.position = getter.position
    res.ended = getter.ended
    res.behind = getter.millis_behind_latest
    res.calls = end.events


def _count_error(res: ReadResult, batch: ShardBatch) -> None:
    from kinesis_spout.errors import ExpiredIteratorError, ResourceInUseError, ThrottledError

    err = batch.error
    res.last_error = format_error(err) if err is not None else None
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
