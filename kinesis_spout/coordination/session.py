"""The shard coordinator's side of ZooKeeper sessions: SUSPENDED, LOST, CONNECTED.

kazoo reports connection states on its own thread; the coordinator queues them
and handles them here, on the thread that owns the spout:

* SUSPENDED: every held or releasing lease is SUSPENDED (the spout stops);
* LOST, or CONNECTED with a new session: every lease is gone; once a session
  is up, what the spout can flush is flushed (accepted only where no other
  worker took the shard over), every shard is dropped and the worker rejoins;
* CONNECTED, same session: each suspended lease whose holder node is still
  ours is HELD again; the others are dropped.

A mixin of :class:`~kinesis_spout.coordination.coordinator.ShardCoordinator`
(its state lives there).
"""

from __future__ import annotations

import logging
import queue
from typing import TYPE_CHECKING

from kazoo.client import KazooState

from kinesis_spout.coordination.control import SpoutControl
from kinesis_spout.coordination.leases import Lease, LeaseState, ZooKeeperLeases
from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.metrics import MetricsCollector

if TYPE_CHECKING:
    from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore

log = logging.getLogger("kinesis_spout.coordination.coordinator")


class SessionEvents:
    """Connection-state handling of the coordinator; see the module docstring."""

    store: ZooKeeperCheckpointStore
    spout: SpoutControl
    leases: ZooKeeperLeases
    worker_id: str
    _metrics: MetricsCollector
    _events: queue.SimpleQueue[tuple[str, str]]
    _states: dict[str, LeaseState]
    _held: dict[str, Lease]
    _to_release: dict[str, Lease]
    _session: int | None
    _registered: bool
    _dirty: bool
    _verify: bool
    _lost: bool

    def _sync_spout(self) -> None:
        raise NotImplementedError  # the coordinator's

    def _drain_events(self) -> None:
        while True:
            try:
                kind, value = self._events.get_nowait()
            except queue.Empty:
                return
            if kind == "watch":
                self._dirty = True
            elif value == KazooState.SUSPENDED:
                for shard, st in self._states.items():
                    if st in (LeaseState.HELD, LeaseState.RELEASING):
                        self._states[shard] = LeaseState.SUSPENDED
            elif value == KazooState.LOST:
                self._lose_leases()
            elif value == KazooState.CONNECTED:
                if self.store.session_id != self._session:
                    self._lose_leases()
                self._verify = True
                self._dirty = True

    def _lose_leases(self) -> None:
        if not self._lost:
            log.warning(
                "worker %s: ZooKeeper session lost; its %d lease(s) are gone",
                self.worker_id,
                len(self._held),
            )
        self._lost = True
        self._registered = False
        for shard in self._states:
            self._states[shard] = LeaseState.SUSPENDED

    def _recover_from_loss(self) -> None:
        """New session after LOST: flush what we can, drop every shard, start over."""
        try:
            self.spout.checkpoint(force=True)
        except KinesisSpoutError as exc:
            log.info("flush after session loss partly refused: %s", exc)
        lost = sorted(self._states)
        self._states.clear()
        self._sync_spout()
        for shard in lost:
            self.leases.forget(shard)
        self._metrics.increment("leases_lost", len(self._held))
        self._held.clear()
        self._to_release.clear()
        self._session = self.store.session_id
        self._lost = False
        self._verify = False
        self._dirty = True
        log.info("worker %s dropped %d shard(s) after session loss", self.worker_id, len(lost))

    def _verify_suspended(self) -> None:
        """Same session back: keep the leases whose holder node is still ours."""
        gone = []
        for shard, st in list(self._states.items()):
            if st is not LeaseState.SUSPENDED:
                continue
            lease = self._held.get(shard)
            if lease is not None and self.leases.still_held(lease):
                self._states[shard] = LeaseState.HELD
            else:
                gone.append(shard)
        if gone:
            log.warning("worker %s: leases of %s gone while disconnected", self.worker_id, gone)
            for shard in gone:
                del self._states[shard]
            self._sync_spout()
            for shard in gone:
                self._held.pop(shard, None)
                self.leases.forget(shard)
        self._verify = False
