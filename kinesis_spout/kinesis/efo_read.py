"""A bounded enhanced fan-out read, for tasks that read a range and return (executors).

A read task subscribes from its start position, takes events until its record
limit, the shard's tip (an event not behind), the end of a closed shard or its
time budget, closes the subscription and returns the key of its last record:
the next task subscribes after it. :func:`subscribed_getter` builds the getter
(one boto3 client per process and endpoint) and :func:`read_until` runs that loop
over it; the Spark job's read tasks and the streaming source's first reads share them.

A task that subscribed but got no event within its budget counts as caught up (nothing
arrived); one whose subscription did not even start in time does not; one that Kinesis
refused (throttling, another subscription to the shard still active) reports the error
instead, so its owner backs off.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from kinesis_spout.config import InitialPosition
from kinesis_spout.errors import KinesisError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.efo_api import FanOutApi
from kinesis_spout.kinesis.efo_getter import EfoShardGetter
from kinesis_spout.records import ShardBatch
from tracker import ExponentialBackoff, JitteredBackoff, SequenceKey

_FANOUT: dict[tuple[str | None, str, str, str | None], FanOutApi] = {}
"""Enhanced fan-out APIs of this process, per (endpoint, region, stream)."""


def _fanout(
    endpoint_url: str | None, region: str, stream: str, profile: str | None = None
) -> FanOutApi:
    from kinesis_spout.kinesis.client import make_client

    key = (endpoint_url, region, stream, profile)
    api = _FANOUT.get(key)
    if api is None:
        client = make_client(endpoint_url, region, profile=profile, max_pool_connections=64)
        api = _FANOUT[key] = FanOutApi(KinesisApi(client, stream))
    return api


@dataclass(frozen=True, slots=True)
class EfoTarget:
    """Where a task subscribes: the stream's endpoint and the consumer."""

    stream_name: str
    region: str
    endpoint_url: str | None
    consumer_arn: str
    throttle_backoff: float = 0.5
    throttle_backoff_max: float = 10.0
    profile: str | None = None
    """The AWS profile of the client (None: ``AWS_PROFILE`` or the default chain)."""


def subscribed_getter(
    target: EfoTarget,
    shard_id: str,
    *,
    start: SequenceKey | None,
    after_whole: bool,
    position: InitialPosition,
    timestamp: datetime | None,
    limit: int,
    closed: bool,
) -> EfoShardGetter:
    """An :class:`EfoShardGetter` for one bounded read (subscribes at its first poll)."""
    backoff = JitteredBackoff(
        ExponentialBackoff(target.throttle_backoff, cap=target.throttle_backoff_max),
        random.Random(),
    )
    return EfoShardGetter(
        _fanout(target.endpoint_url, target.region, target.stream_name, target.profile),
        target.consumer_arn,
        shard_id,
        backoff=backoff,
        start=start,
        after_whole=after_whole,
        position=position,
        timestamp=timestamp,
        limit=max(1, limit),
        closed_hint=closed,
        poll_interval=0.02,
    )


@dataclass(slots=True)
class ReadEnd:
    """How a bounded read ended."""

    caught_up: bool = False
    """It reached the shard's tip, or nothing arrived within its budget."""
    events: int = 0
    """Events taken."""
    errors: list[KinesisError] = field(default_factory=list)
    """Retriable errors met (the subscription retried them)."""


def read_until(
    getter: EfoShardGetter,
    limit: int,
    seconds: float,
    take: Callable[[ShardBatch], int],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ReadEnd:
    """Poll ``getter`` until ``limit`` records were taken, the tip, the shard's end or
    ``seconds``; ``take(batch)`` consumes each batch and returns how many records it
    took (fewer ends the read: a cutoff). The subscription is closed at the end."""
    end = ReadEnd()
    deadline = clock() + seconds
    remaining = limit
    subscribed = False
    try:
        while remaining > 0 and not getter.ended:
            now = clock()
            wake = getter.next_poll_at
            if now < wake:
                if wake > deadline:
                    break
                sleep(wake - now)
                now = clock()
            getter.limit = remaining
            batch = getter.poll(now)
            if batch.error is not None:
                end.errors.append(batch.error)
            if not batch.called:
                continue
            end.events += 1
            took = take(batch)
            remaining -= took
            if took < len(batch.records):
                break
            if batch.ended or (getter.at_tip and not getter.buffered):
                end.caught_up = not batch.ended
                break
        subscribed = getter.pump.subscriptions > 0
    finally:
        getter.close()
    if not end.events and not end.errors:
        # Subscribed and nothing arrived within the budget: at the tip. (Not subscribed
        # yet within it: a slow start, which says nothing about the shard.)
        end.caught_up = subscribed
    return end
