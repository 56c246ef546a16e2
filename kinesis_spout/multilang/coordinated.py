"""Several Storm tasks of one spout component: ZooKeeper shard leases.

When Storm runs the component with parallelism N > 1, each task is a separate
child process. They must not all read every shard: :class:`CoordinatedSpout`
wraps a :class:`~kinesis_spout.spout.KinesisSpout` of the config's streams (one or
several) with a :class:`~kinesis_spout.coordination.coordinator.ShardCoordinator` per
stream (:mod:`kinesis_spout.coordination.group`), so each task reads only the shards
whose leases it holds, as the coordination worker does (the checkpoint store must be
``zk://``; each task's ``worker_id`` is unique by default: host and pid).

Storm's ``deactivate`` stops emitting on top of what the coordinators decide.
At the end (end of input, SIGTERM) no ack can arrive any more, so there is
nothing to drain: the spout writes its checkpoints (still fenced by the
leases), then the ZooKeeper session is closed, which deletes this task's
ephemeral lease nodes, and the other tasks take the shards over.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kinesis_spout.config import SpoutConfig
from kinesis_spout.errors import ConfigError, KinesisSpoutError
from kinesis_spout.metrics import NoopMetrics
from kinesis_spout.observability.endpoint import MetricsEndpoint
from kinesis_spout.records import Record

if TYPE_CHECKING:
    from kinesis_spout.coordination.group import StreamCoordinators

log = logging.getLogger(__name__)


def storm_parallelism(context: Mapping[str, Any]) -> int:
    """How many tasks run this component (from the handshake's topology context)."""
    mapping = context.get("task->component")
    component = context.get("componentid")
    if not isinstance(mapping, Mapping) or not isinstance(component, str):
        return 1
    return max(1, sum(1 for c in mapping.values() if c == component))


def require_shared_store(config: SpoutConfig, parallelism: int, component: str | None) -> None:
    """:class:`ConfigError` unless ``parallelism`` tasks can share the stream."""
    if parallelism > 1 and not config.checkpoint_store.startswith("zk://"):
        raise ConfigError(
            "checkpoint_store",
            config.checkpoint_store,
            f"a zk:// URL: Storm runs component {component!r} as {parallelism} tasks, which "
            "share the shards of its streams through ZooKeeper leases (a dynamodb:// store "
            "holds one reader per job)",
        )


class CoordinatedSpout:
    """A spout that reads only the shards this task holds leases for, in each of its
    streams."""

    def __init__(self, config: SpoutConfig, *, drain_timeout: float = 10.0) -> None:
        from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore
        from kinesis_spout.kinesis.client import make_client
        from kinesis_spout.spout import KinesisSpout

        require_shared_store(config, 2, None)
        self.config = config
        self._drain_timeout = drain_timeout
        # First: a taken metrics port fails before ZooKeeper is even connected.
        self.endpoint = MetricsEndpoint.of(config, "worker")
        self._metrics = (
            self.endpoint.start().metrics if self.endpoint is not None else NoopMetrics()
        )
        try:  # a bad zk_auth, an unreachable ZooKeeper: the port is let go
            self.store = ZooKeeperCheckpointStore.from_url(
                config.checkpoint_store,
                config.job_name,
                owner=config.worker_id,
                auth=config.zk_auth,
                session_timeout=config.zk_session_timeout,
            )
        except BaseException:
            if self.endpoint is not None:
                self.endpoint.close()
            raise
        self._client = make_client(
            config.endpoint_url, config.region, profile=config.profile, role=config.assumed_role
        )
        # The tasks share the streams through shard leases: no job lease.
        self.spout = KinesisSpout(
            config, store=self.store, client=self._client, metrics=self._metrics, job_lease=False
        )
        self.coordinators: StreamCoordinators | None = None
        """One coordinator per stream, from :meth:`open` on."""
        self._storm_active = True
        self._closed = False

    def open(self) -> None:
        from kinesis_spout.coordination.group import StreamCoordinators

        self.spout.open()
        self.coordinators = StreamCoordinators.start(
            self.spout, self.store, self._client, self._metrics, self._drain_timeout
        )

    def _group(self) -> StreamCoordinators:
        if self.coordinators is None:
            raise KinesisSpoutError("CoordinatedSpout: call open() first")
        return self.coordinators

    def next_batch(self, max_records: int) -> list[Record]:
        group = self._group()
        group.poll()
        if not self._storm_active:
            return []
        batch = self.spout.next_batch(max_records)
        group.leave_gone()  # a stream of several deleted or created again
        return batch

    def poll_delay(self) -> float:
        return min(self.spout.poll_delay(), self._group().poll_delay())

    def ack(self, message_id: str) -> None:
        self.spout.ack(message_id)

    def fail(self, message_id: str, error: str | None = None) -> None:
        self.spout.fail(message_id, error)

    def checkpoint(self, force: bool = False) -> None:
        self._group().poll()
        self.spout.checkpoint(force)

    def activate(self) -> None:
        self._storm_active = True

    def deactivate(self) -> None:
        self._storm_active = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.spout.close()
        finally:
            if self.coordinators is not None:
                self.coordinators.close()
            self.store.close()
            if self.endpoint is not None:
                self.endpoint.close()
        log.info("left the worker groups of %s", ", ".join(self.config.stream_names))

    def owned_shards(self) -> dict[str, frozenset[str]]:
        """The shards whose lease this task holds, by stream."""
        return self._group().owned_shards()
