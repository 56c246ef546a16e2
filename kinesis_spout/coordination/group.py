"""The shard coordinators of one reader's streams, stepped together.

Workers sharing a job's streams through ZooKeeper shard leases each hold one
:class:`~kinesis_spout.spout.KinesisSpout` (no job lease: the shard leases fence them)
and one :class:`~kinesis_spout.coordination.coordinator.ShardCoordinator` per stream,
each steering its stream's shards (:meth:`KinesisSpout.stream`); the leases and worker
groups are each stream's, as with one stream. Each stream's assignment is rotated past
the extra shards of the streams before it
(:func:`~kinesis_spout.coordination.assignment.stream_rotations`), so the streams' shards
are balanced over the workers as a whole: every worker of a job lists the same streams
in the same order. A stream the reader lets go (deleted, created again) loses its
coordinator (:meth:`ShardCoordinator.abandon`); with no stream left, an error.

Used by the coordination worker and by the multilang spout's Storm tasks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore
from kinesis_spout.coordination.assignment import stream_rotations
from kinesis_spout.coordination.coordinator import ShardCoordinator
from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.spout import KinesisSpout

log = logging.getLogger(__name__)


class StreamCoordinators:
    """One coordinator per stream the reader still reads, in the config's order.

    :meth:`poll` polls each after setting its rotation from the splits of the streams
    before it (just polled): a change there rebalances it in the same step.
    """

    def __init__(self, reader: KinesisSpout, coordinators: list[ShardCoordinator]) -> None:
        self.reader = reader
        self.coordinators = coordinators
        self.several = len(reader.config.stream_names) > 1

    @classmethod
    def start(
        cls,
        reader: KinesisSpout,
        store: ZooKeeperCheckpointStore,
        client: Any,
        metrics: MetricsCollector,
        drain_timeout: float,
    ) -> StreamCoordinators:
        """A started coordinator for each stream the opened ``reader`` still reads (several
        streams: rotated, and each one's metrics labelled with its stream)."""
        config = reader.config
        several = len(config.stream_names) > 1
        labelled = getattr(metrics, "for_stream", None) if several else None
        coordinators = [
            ShardCoordinator(
                store,
                one.stream_name,
                reader.stream(one.stream_name),
                worker_id=config.worker_id,
                list_shards=_lister(KinesisApi(client, one.stream_name, one.stream_arn)),
                shard_refresh_interval=config.shard_refresh_interval,
                drain_timeout=drain_timeout,
                metrics=labelled(one.stream_name) if labelled is not None else metrics,
                rotation=0 if several else None,
            )
            for one in config.per_stream()
            if one.stream_name not in reader.gone
        ]
        group = cls(reader, coordinators)
        for coordinator in coordinators:
            coordinator.start()
        return group

    def poll(self) -> None:
        """Poll each coordinator, rotated past the streams before it when several."""
        for i, coordinator in enumerate(self.coordinators):
            if self.several:
                coordinator.set_rotation(stream_rotations(c.split for c in self.coordinators)[i])
            coordinator.poll()

    def poll_delay(self) -> float:
        """Seconds until :meth:`poll` has timed work to do (none: infinity)."""
        return min((c.poll_delay() for c in self.coordinators), default=math.inf)

    def leave_gone(self) -> None:
        """Abandon the coordinators of the streams the reader let go; an error when no
        stream is left."""
        gone = self.reader.gone
        for coordinator in [c for c in self.coordinators if c.stream_name in gone]:
            coordinator.abandon()
            self.coordinators.remove(coordinator)
        if not self.coordinators:
            raise KinesisSpoutError(f"no stream left to read: {dict(gone)}")

    def begin_shutdown(self) -> None:
        """Give every shard of every stream up; keep polling until :attr:`done`."""
        for coordinator in self.coordinators:
            coordinator.begin_shutdown()

    @property
    def done(self) -> bool:
        """After :meth:`begin_shutdown`: nothing held in any stream, member nodes gone."""
        return all(c.done for c in self.coordinators)

    def owned_shards(self) -> dict[str, frozenset[str]]:
        """The shards whose lease is held, by stream."""
        return {c.stream_name: c.owned_shards for c in self.coordinators}

    def close(self) -> None:
        """Stop listening (the store and the reader are the caller's to close)."""
        for coordinator in self.coordinators:
            coordinator.close()


def _lister(api: KinesisApi) -> Callable[[], list[str]]:
    """The stream's shard ids, listed anew at each call (bound here, not in a loop)."""
    return lambda: [s.shard_id for s in api.list_shards()]
