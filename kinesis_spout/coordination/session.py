"""The ZooKeeper session the shard coordinator's leases live in: SUSPENDED, LOST, CONNECTED.

kazoo reports connection states and fires watches on its own thread; :class:`ZkSession`
only queues them there. On the thread that owns the spout, :meth:`ZkSession.drain` reads
the queue and says what the events mean (:class:`SessionNews`: suspend, lose, rebalance;
:attr:`ZkSession.reconnected` when the same session came back); the coordinator, which
owns the lease tables and the spout, acts on it as docs/checkpoints.md ("The safety
rules") says, and tells the session when it has rejoined (:meth:`ZkSession.renewed`) or
checked its leases again (:meth:`ZkSession.verified`).
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooState

if TYPE_CHECKING:
    from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore


@dataclass(frozen=True, slots=True)
class SessionNews:
    """What the events one :meth:`ZkSession.drain` handled mean for the coordinator."""

    rebalance: bool
    """A watched node changed, or the connection is back: rebalance."""
    suspend: bool
    """SUSPENDED: the held and releasing leases are suspended."""
    lose: bool
    """The session is gone: every lease is suspended, the member node is gone."""
    newly_lost: bool
    """``lose``, and the session was not lost before these events (worth a warning)."""


class ZkSession:
    """kazoo's events, queued for the coordinator, and the state of its session.

    Its own state: the queue, the id of the session the coordinator's leases
    were taken in, whether that session is lost (until :meth:`renewed`) and
    whether the connection came back in it (until :meth:`verified`). The
    lease tables are the coordinator's; see the module docstring.
    """

    def __init__(self, store: ZooKeeperCheckpointStore) -> None:
        self._store = store
        self._events: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
        self._session: int | None = None
        self._lost = False
        self._reconnected = False

    # -- kazoo's thread: enqueue only ------------------------------------------------
    def _on_state(self, state: str) -> None:
        self._events.put(("state", state))

    def on_watch(self, event: Any) -> None:
        """The watch to pass to ZooKeeper reads: wakes the coordinator to rebalance."""
        self._events.put(("watch", str(getattr(event, "path", ""))))

    # -- the worker's thread --------------------------------------------------------
    def listen(self) -> None:
        """Take the current session as the leases' one; listen to connection states."""
        self._session = self._store.session_id
        self._store.client.add_listener(self._on_state)

    def close(self) -> None:
        """Stop listening."""
        self._store.client.remove_listener(self._on_state)

    @property
    def pending(self) -> bool:
        """Whether events are queued (:meth:`drain` has work)."""
        return not self._events.empty()

    @property
    def lost(self) -> bool:
        """The leases' session is gone, and the coordinator has not yet dropped its shards."""
        return self._lost

    @property
    def reconnected(self) -> bool:
        """The connection came back; the suspended leases are to be checked."""
        return self._reconnected

    def drain(self) -> SessionNews:
        """Handle every queued event, in order; say what they mean together."""
        rebalance = suspend = lose = False
        was_lost = self._lost
        while True:
            try:
                kind, value = self._events.get_nowait()
            except queue.Empty:
                break
            if kind == "watch":
                rebalance = True
            elif value == KazooState.SUSPENDED:
                suspend = True
            elif value == KazooState.LOST:
                lose = True
            elif value == KazooState.CONNECTED:
                if self._store.session_id != self._session:
                    lose = True
                self._reconnected = True
                rebalance = True
        self._lost = was_lost or lose
        return SessionNews(rebalance, suspend, lose, lose and not was_lost)

    def renewed(self) -> None:
        """The coordinator dropped every shard of the lost session: the current
        session is the leases' one, nothing is lost or left to check."""
        self._session = self._store.session_id
        self._lost = False
        self._reconnected = False

    def verified(self) -> None:
        """The coordinator checked the suspended leases after a reconnection."""
        self._reconnected = False
