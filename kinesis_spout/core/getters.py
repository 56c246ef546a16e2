"""Which getter reads a shard: GetRecords polling, or an enhanced fan-out subscription.

:class:`GetterFactory` is set up when a reader opens. With ``consumer = "efo"`` it
makes sure the consumer is registered and ACTIVE (:func:`ensure_consumer`), and
the shards it starts are read by :class:`EfoShardGetter`; otherwise by
:class:`KinesisShardGetter`. A reader whose shards are read elsewhere (the Spark job's
driver: its tasks read, and subscribe themselves) takes only a getter's start position
(:attr:`GetterFactory.read_here` False). Checkpoints are sequence numbers either way, so
a job may switch between the two and resume.
"""

from __future__ import annotations

import logging
import random
from datetime import datetime

from kinesis_spout.config import InitialPosition, SpoutConfig
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.buffered import ShardGetter
from kinesis_spout.kinesis.consumer import deregister_consumer, ensure_consumer
from kinesis_spout.kinesis.efo_api import Consumer, FanOutApi
from kinesis_spout.kinesis.efo_getter import EfoShardGetter
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.kinesis.shards import ShardMap
from kinesis_spout.records import Checkpoint
from tracker import Backoff, ExponentialBackoff, JitteredBackoff, SequenceKey

log = logging.getLogger(__name__)


class GetterFactory:
    """Makes the getters of one reader; see the module docstring."""

    def __init__(
        self, config: SpoutConfig, api: KinesisApi, backoff: Backoff, *, read_here: bool = True
    ) -> None:
        self.config = config
        self.api = api
        self.backoff = backoff
        self.read_here = read_here
        """The reader polls (or subscribes to) its shards itself (False: positions only,
        tasks elsewhere read)."""
        self.fanout: FanOutApi | None = None
        self.consumer: Consumer | None = None

    @property
    def efo(self) -> bool:
        return self.config.consumer == "efo"

    def open(self) -> None:
        """Register the enhanced fan-out consumer if absent and wait until it is ACTIVE."""
        if self.efo and self.consumer is None:
            self.fanout = FanOutApi(self.api)
            self.consumer = ensure_consumer(self.fanout, self.config.efo_consumer_name)

    def close(self) -> None:
        """Deregister the consumer if ``deregister_on_close`` (after the getters closed)."""
        if self.fanout is not None and self.consumer is not None:
            if self.config.deregister_on_close:
                deregister_consumer(self.fanout, self.consumer.name)
            self.consumer = None

    def for_shard(
        self, shard_id: str, stored: Checkpoint | None, fresh_pin: bool, shards: ShardMap
    ) -> tuple[ShardGetter, SequenceKey | None, InitialPosition]:
        """The getter of a shard starting to be read: ``(getter, start key, position)``.

        After its checkpoint; else from a pinned start (``fresh_pin``: pinned by this
        open: a LATEST shard reads from the exact LATEST, the pin is its fallback);
        else at the initial position, except that a child of shards read to their end
        continues them from its start (TRIM_HORIZON).
        """
        cfg = self.config
        start = stored.key if stored is not None else None
        position, timestamp = cfg.initial_position, cfg.initial_timestamp
        known_parent = shards.has_known_parent(shard_id)
        if stored is not None and stored.is_pin:
            if not (fresh_pin and not known_parent and position is InitialPosition.LATEST):
                position, timestamp = InitialPosition.AT_TIMESTAMP, stored.start_at
        elif position is InitialPosition.LATEST and known_parent:
            position = InitialPosition.TRIM_HORIZON
        info = shards.get(shard_id)
        closed = info is not None and info.is_closed
        getter = self.make(
            shard_id, start=start, position=position, timestamp=timestamp, closed=closed
        )
        if position is InitialPosition.LATEST:
            getter.open_now()  # LATEST as of the open, not of the first poll
        return getter, start, position

    def make(
        self,
        shard_id: str,
        *,
        start: SequenceKey | None,
        position: InitialPosition,
        timestamp: datetime | None,
        closed: bool = False,
    ) -> ShardGetter:
        """The getter of a shard starting after ``start`` (else at ``position``)."""
        cfg = self.config
        if self.read_here and self.fanout is not None and self.consumer is not None:
            return EfoShardGetter(
                self.fanout,
                self.consumer.arn,
                shard_id,
                backoff=self.backoff,
                start=start,
                position=position,
                timestamp=timestamp,
                limit=cfg.records_per_call,
                renew_after=cfg.subscription_renewal,
                closed_hint=closed,
            )
        return KinesisShardGetter(
            self.api,
            shard_id,
            backoff=self.backoff,
            start=start,
            position=position,
            timestamp=timestamp,
            limit=cfg.records_per_call,
            max_calls_per_second=cfg.max_calls_per_second,
            empty_shard_backoff=cfg.empty_shard_backoff,
            empty_shard_backoff_max=cfg.empty_shard_backoff_max,
        )


def throttle_backoff(config: SpoutConfig, rng: random.Random) -> Backoff:
    """The throttling backoff of ``config``, with jitter from ``rng`` (the retries of
    failed records have theirs in :class:`~kinesis_spout.core.retrypolicy.RetryPolicy`)."""
    return JitteredBackoff(
        ExponentialBackoff(config.throttle_backoff, cap=config.throttle_backoff_max), rng
    )
