"""Drive one spout from ZooKeeper shard leases: several workers, one stream.

Each worker registers an ephemeral member node, computes the assignment of the stream's
live shards over the live workers (:func:`assign_shards`), takes the leases of its shards
and gives up the others, flushing before it releases. The spout is told through
``set_owned_shards``, ``deactivate`` and ``activate`` only; it never sees ZooKeeper.
kazoo's callbacks only queue events (:class:`~kinesis_spout.coordination.session.ZkSession`
says what they mean); everything else happens in :meth:`poll`, on the thread that owns
the spout, between batches. The safety rules (flush before release, SUSPENDED, LOST):
docs/checkpoints.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore
from kinesis_spout.coordination.assignment import assign_shards
from kinesis_spout.coordination.control import ShardLister, SpoutControl, plan_leases
from kinesis_spout.coordination.leases import Lease, LeaseState, ZooKeeperLeases
from kinesis_spout.coordination.session import ZkSession
from kinesis_spout.errors import (
    CheckpointStoreUnavailableError,
    KinesisSpoutError,
)
from kinesis_spout.metrics import MetricsCollector, NoopMetrics

log = logging.getLogger(__name__)


class ShardCoordinator:
    """Shard ownership of one worker on one stream; see the module docstring.

    ``list_shards`` is called at start and every ``shard_refresh_interval``
    seconds. Shards whose checkpoint says ``shard_end`` are not assigned.
    ``retry_interval``: how often a lease held by another worker is tried
    again (a deletion watch usually wakes us sooner). ``rotation``: a worker of
    several streams has one coordinator per stream, each rotated past the extra
    shards of the streams before it (:meth:`set_rotation`), so that the streams'
    extra shards go to different workers.

    Over 300 lines as one job: the lease tables and every change to them
    (rebalance, release, the session's news, a stream let go), the spout steered
    from them; the module is over 400 lines for the same reason.
    """

    def __init__(
        self,
        store: ZooKeeperCheckpointStore,
        stream_name: str,
        spout: SpoutControl,
        *,
        worker_id: str,
        list_shards: ShardLister,
        clock: Callable[[], float] = time.monotonic,
        shard_refresh_interval: float = 30.0,
        retry_interval: float = 1.0,
        drain_timeout: float = 10.0,
        metrics: MetricsCollector | None = None,
        rotation: int | None = None,
    ) -> None:
        self.store = store
        self.stream_name = stream_name
        self.worker_id = worker_id
        self.spout = spout
        self.leases = ZooKeeperLeases(store, stream_name, worker_id)
        self.session = ZkSession(store)
        self._list_shards = list_shards
        self._clock = clock
        self._refresh_interval = shard_refresh_interval
        self._retry_interval = retry_interval
        self._drain_timeout = drain_timeout
        self._metrics: MetricsCollector = metrics or NoopMetrics()
        self.rotation = rotation
        """This stream's :func:`assign_shards` rotation (None: a worker of one stream)."""
        self.split = (0, 0)
        """``(live shards, workers)`` at the last rebalance: what the next streams'
        rotations are computed from
        (:func:`~kinesis_spout.coordination.assignment.stream_rotations`)."""

        self._states: dict[str, LeaseState] = {}
        self._held: dict[str, Lease] = {}
        self._to_release: dict[str, Lease] = {}
        self._spout_shards: frozenset[str] | None = None
        self._spout_active: bool | None = None
        self._shards: list[str] | None = None
        self._registered = False
        self._dirty = True
        self._next_check = 0.0
        self._next_refresh = 0.0
        self._next_register = 0.0
        self._drain_deadline: float | None = None
        self._draining: frozenset[str] = frozenset()
        self._started = False
        self._shutting_down = False

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Fence the store's writes on leases, give the spout no shard, listen.

        Call before the spout emits anything (before or right after ``open``).
        """
        if self._started:
            return
        self._started = True
        self.store.require_leases(self.stream_name)
        self.session.listen()
        self._sync_spout()
        self._set_active(False)
        log.info("coordinator of worker %s on %s started", self.worker_id, self.stream_name)

    def begin_shutdown(self) -> None:
        """Give every shard up (drain, flush, release) and leave; keep polling
        until :attr:`done`."""
        if not self._shutting_down:
            log.info("worker %s leaving %s", self.worker_id, self.stream_name)
        self._shutting_down = True
        self._dirty = True

    @property
    def done(self) -> bool:
        """After :meth:`begin_shutdown`: nothing held, member node gone."""
        return (
            self._shutting_down
            and not self._states
            and not self._to_release
            and not self._registered
        )

    def close(self) -> None:
        """Stop listening (the store and the spout are the caller's to close)."""
        self.session.close()

    def set_rotation(self, rotation: int) -> None:
        """Rotate this stream's assignment (see :func:`assign_shards`): a change is
        a rebalance, when the streams before this one changed their split."""
        if rotation != self.rotation:
            self.rotation = rotation
            self._dirty = True

    def abandon(self) -> None:
        """The stream is no longer read (deleted, or created again; its spout closed
        and saved what was done): delete the leases and the member node without the
        spout, stop listening. What ZooKeeper refuses now goes with the session."""
        held = [*self._held.values(), *self._to_release.values()]
        self._states.clear()
        self._held.clear()
        self._to_release.clear()
        try:
            for lease in held:
                self.leases.release(lease)
            if self._registered:
                self.leases.unregister()
        except CheckpointStoreUnavailableError as exc:
            log.warning(
                "worker %s leaves %s with its session: %s", self.worker_id, self.stream_name, exc
            )
        self._registered = False
        self._shutting_down = True
        self.close()
        log.info(
            "worker %s left %s: the stream is no longer read", self.worker_id, self.stream_name
        )

    # -- the worker's thread --------------------------------------------------------
    def poll(self) -> None:
        """Handle connection events and rebalance if needed. Cheap when idle
        (no ZooKeeper call); call it from the loop that drives the spout."""
        if not self._started:
            self.start()
        self._drain_events()
        now = self._clock()
        if self.store.connected:
            try:
                self._step(now)
            except CheckpointStoreUnavailableError as exc:
                log.warning("coordination paused: %s", exc)
                self._dirty = True
        self._set_active(self._should_emit())

    def poll_delay(self) -> float:
        """Seconds until :meth:`poll` has timed work to do (0 = now)."""
        if self.session.pending:
            return 0.0
        if not self.store.connected:
            return min(0.1, self._retry_interval)
        if self._dirty:
            return 0.0
        now = self._clock()
        due = self._next_check
        if self._drain_deadline is not None:
            due = min(due, now + 0.05)
        return max(0.0, min(due - now, self._retry_interval))

    def lease_states(self) -> dict[str, LeaseState]:
        """Each shard this worker is acquiring, holds or is releasing."""
        return dict(self._states)

    @property
    def owned_shards(self) -> frozenset[str]:
        """Shards whose lease is HELD (the spout reads them)."""
        return frozenset(s for s, st in self._states.items() if st is LeaseState.HELD)

    @property
    def emitting(self) -> bool:
        """Whether the spout was last told to emit."""
        return bool(self._spout_active)

    # -- internals ----------------------------------------------------------------------
    def _should_emit(self) -> bool:
        return (
            self.store.connected
            and not self.session.lost
            and all(st is not LeaseState.SUSPENDED for st in self._states.values())
        )

    def _set_active(self, active: bool) -> None:
        if active == self._spout_active:
            return
        self._spout_active = active
        if active:
            self.spout.activate()
        else:
            self.spout.deactivate()
        log.info("worker %s %s emitting", self.worker_id, "resumes" if active else "stops")

    def _sync_spout(self) -> None:
        owned = frozenset(s for s, st in self._states.items() if st is not LeaseState.ACQUIRING)
        if owned == self._spout_shards:
            return
        self._spout_shards = owned
        try:
            self.spout.set_owned_shards(sorted(owned))
        except KinesisSpoutError as exc:
            if not exc.retriable:
                raise  # e.g. a corrupt checkpoint: a clear error, not a silent restart
            log.warning("spout could not take its new shard set yet: %s", exc)
            self._spout_shards = None  # try again on the next poll

    # -- session events (what they mean: ZkSession) ----------------------------------
    def _drain_events(self) -> None:
        news = self.session.drain()
        if news.newly_lost:
            log.warning(
                "worker %s: ZooKeeper session lost; its %d lease(s) are gone",
                self.worker_id,
                len(self._held),
            )
        if news.lose:
            self._registered = False
        if news.lose or news.suspend:
            for shard, st in self._states.items():
                if news.lose or st in (LeaseState.HELD, LeaseState.RELEASING):
                    self._states[shard] = LeaseState.SUSPENDED
        if news.rebalance:
            self._dirty = True

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
        self.session.renewed()
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
        self.session.verified()

    # -- leases: step, rebalance, release -------------------------------------------
    def _step(self, now: float) -> None:
        if self.session.lost:
            self._recover_from_loss()
        if self.session.reconnected:
            self._verify_suspended()
        for shard, lease in list(self._to_release.items()):
            self.leases.release(lease)
            del self._to_release[shard]
        if not self._registered and not self._shutting_down and now >= self._next_register:
            self._registered = self.leases.register()
            if not self._registered:
                log.info("worker id %s still registered by an old session; waiting", self.worker_id)
                self._next_register = now + self._retry_interval
        if self._dirty or now >= self._next_check:
            self._rebalance(now)
        self._progress_release(now)
        self._sync_spout()
        if self._shutting_down and self._registered and not self._states and not self._to_release:
            self.leases.unregister()
            self._registered = False

    def _rebalance(self, now: float) -> None:
        self._dirty = False
        self._next_check = now + self._refresh_interval
        workers = self.leases.workers(watch=self.session.on_watch)
        if self._shards is None or now >= self._next_refresh:
            try:
                self._shards = sorted(set(self._list_shards()))
                self._next_refresh = now + self._refresh_interval
            except KinesisSpoutError as exc:
                log.warning("cannot list shards of %s: %s", self.stream_name, exc)
                self._next_check = now + self._retry_interval
                if self._shards is None:
                    return
        ended = {s for s, cp in self.store.load(self.stream_name).items() if cp.shard_end}
        live = [s for s in self._shards if s not in ended]
        self.split = (len(set(live)), len(workers))
        mine: set[str] = set()
        if self._registered and not self._shutting_down:
            assigned = assign_shards(live, workers, self.rotation)
            mine = set(assigned.get(self.worker_id, ()))
        log.debug(
            "rebalance %s: workers=%s live shards=%d mine=%s",
            self.stream_name,
            workers,
            len(live),
            sorted(mine),
        )
        self._metrics.increment("rebalances")

        self._states, to_acquire, given_up = plan_leases(self._states, mine)
        for shard in given_up:
            log.info("worker %s gives up %s/%s", self.worker_id, self.stream_name, shard)
        for shard in to_acquire:
            lease = self.leases.acquire(shard, watch=self.session.on_watch)
            if lease is None:
                self._states[shard] = LeaseState.ACQUIRING
            else:
                self._held[shard] = lease
                self._states[shard] = LeaseState.HELD
                self._metrics.increment("leases_acquired")
        if any(st is LeaseState.ACQUIRING for st in self._states.values()):
            self._next_check = min(self._next_check, now + self._retry_interval)
        self._sync_spout()

    def _progress_release(self, now: float) -> None:
        releasing = [s for s, st in self._states.items() if st is LeaseState.RELEASING]
        if frozenset(releasing) != self._draining:
            self._draining = frozenset(releasing)
            self.spout.drain_shards(releasing)  # only these stop; the others flow on
        if not releasing:
            self._drain_deadline = None
            return
        if self._drain_deadline is None:
            self._drain_deadline = now + self._drain_timeout
        in_flight = self.spout.in_flight_of(releasing)
        if in_flight > 0 and now < self._drain_deadline:
            return
        if in_flight > 0:
            log.warning(
                "worker %s releases %s with %d record(s) still in flight (drain timeout); "
                "they will be replayed by the next owner",
                self.worker_id,
                releasing,
                in_flight,
            )
        for shard in releasing:
            del self._states[shard]
        self._sync_spout()  # the spout writes their final checkpoints, then drops them
        for shard in releasing:
            lease = self._held.pop(shard)
            self._to_release[shard] = lease
        for shard, lease in list(self._to_release.items()):
            self.leases.release(lease)
            del self._to_release[shard]
            self._metrics.increment("leases_released")
        self._drain_deadline = None
