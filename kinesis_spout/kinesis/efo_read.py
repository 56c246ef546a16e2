"""The getter of a bounded enhanced fan-out read, for tasks that read a range and return.

A read task subscribes from its start position, takes events until its record
limit, the shard's tip (an event not behind), the end of a closed shard or its
time budget, closes the subscription and returns the key of its last record:
the next task subscribes after it. :func:`subscribed_getter` builds the getter
(one boto3 client per process and endpoint), and
:func:`~kinesis_spout.kinesis.bounded.read_until` runs the read over it, as over a
polling getter; the Spark job's read tasks and the streaming source's first reads
share them.

A task that subscribed but got no event within its budget counts as caught up (nothing
arrived); one whose subscription did not even start in time does not; one that Kinesis
refused (throttling, another subscription to the shard still active) reports the error
instead, so its owner backs off.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

from kinesis_spout.aws import AssumedRole
from kinesis_spout.config import InitialPosition
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.efo_api import FanOutApi
from kinesis_spout.kinesis.efo_getter import EfoShardGetter
from tracker import ExponentialBackoff, JitteredBackoff, SequenceKey

_FANOUT: dict[tuple[str | None, str, str, str | None, AssumedRole | None], FanOutApi] = {}
"""Enhanced fan-out APIs of this process, per (endpoint, region, stream, profile, role): each
looks its stream's ARN up once. Their boto3 client is the process's
(:func:`~kinesis_spout.kinesis.client.process_client`)."""


def _fanout(
    endpoint_url: str | None,
    region: str,
    stream: str,
    profile: str | None = None,
    role: AssumedRole | None = None,
) -> FanOutApi:
    from kinesis_spout.kinesis.client import process_client

    key = (endpoint_url, region, stream, profile, role)
    api = _FANOUT.get(key)
    if api is None:
        client = process_client(
            endpoint_url, region, profile=profile, role=role, max_pool_connections=64
        )
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
    role: AssumedRole | None = None
    """The IAM role the client assumes (None: the profile's own credentials)."""


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
        _fanout(
            target.endpoint_url, target.region, target.stream_name, target.profile, target.role
        ),
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
