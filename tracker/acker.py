"""Storm's XOR acker: completion of a tuple tree in a fixed number of bytes per root.

Every tuple of a tree gets a random non-zero 64-bit id. The ledger keeps, per root, the
XOR of every id created and every id acked (the *ack-val*): an id XORed in twice
cancels, so the ack-val is 0 exactly when every created id has been acked (up to a
2**-64 chance of a false zero per update). As in Storm, updates and fails may arrive
before the root's init; roots must be fresh for every delivery (``new_id()``, a retry
too), and finished roots are remembered in a bounded FIFO so late updates count as
unknown. The calls: :class:`Acker`'s methods; the memory per open root: docs/figures.md.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["Acker", "AckerEvent", "AckerEventKind", "AckerStats"]

_ID_BITS = 64


class _NoOwner:
    """Marks a root seen in an update or fail before its init."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no owner yet>"


_NO_OWNER = _NoOwner()


class _Root:
    """Ledger entry.  ``val`` None: failed before its init arrived."""

    __slots__ = ("deadline", "owner", "val")

    def __init__(self, val: int | None, owner: Hashable, deadline: float) -> None:
        self.val = val
        self.owner = owner
        self.deadline = deadline


class AckerEventKind(enum.Enum):
    COMPLETE = "complete"
    """Every tuple of the tree was acked: ack the spout record."""
    FAILED = "failed"
    """A tuple of the tree failed: fail the spout record."""
    TIMED_OUT = "timed_out"
    """The tree was not complete within the timeout: fail the spout record."""


@dataclass(frozen=True, slots=True)
class AckerEvent:
    """A root's fate, to pass on to its owner (the spout that emitted it)."""

    root: Hashable
    owner: Hashable
    kind: AckerEventKind


@dataclass(frozen=True, slots=True)
class AckerStats:
    """A snapshot of the acker's counters."""

    inits: int
    updates: int
    completed: int
    failed: int
    timed_out: int
    early_updates: int
    """Updates or fails that arrived before their root's init (kept in the ledger)."""
    unknown_updates: int
    """Updates of a root that already finished: dropped."""
    unknown_fails: int
    """Fails of a root that already finished: dropped."""
    duplicate_inits: int
    """Inits of a root that is open or already finished: dropped."""
    orphans_expired: int
    """Entries that never got their init within the timeout: dropped silently."""
    pending: int
    """Open roots (including those still waiting for their init)."""


class Acker:
    """Storm's XOR ledger.  Pure: ids come from ``rng``, time is an argument.

    ``timeout`` (seconds, None for none) makes ``expire`` time roots out;
    ``remember_finished`` bounds the FIFO of finished roots used to recognise
    late messages.
    """

    __slots__ = (
        "_completed",
        "_dup_inits",
        "_early",
        "_failed",
        "_finished",
        "_finished_order",
        "_inits",
        "_ledger",
        "_orphans",
        "_remember",
        "_rng",
        "_timed_out",
        "_timeout",
        "_tq_at",
        "_tq_root",
        "_unknown_fails",
        "_unknown_updates",
        "_updates",
    )

    def __init__(
        self,
        timeout: float | None = None,
        rng: random.Random | None = None,
        *,
        remember_finished: int = 65536,
    ) -> None:
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout < float("inf")
        ):
            raise ValueError(f"timeout must be None or a finite number > 0, got {timeout!r}")
        if rng is not None and not isinstance(rng, random.Random):
            raise ValueError(f"rng must be None or a random.Random, got {rng!r}")
        if (
            isinstance(remember_finished, bool)
            or not isinstance(remember_finished, int)
            or remember_finished < 0
        ):
            raise ValueError(f"remember_finished must be an int >= 0, got {remember_finished!r}")
        self._timeout: float | None = None if timeout is None else float(timeout)
        self._rng = random.Random() if rng is None else rng
        self._remember = remember_finished
        self._ledger: dict[Hashable, _Root] = {}
        self._finished: set[Hashable] = set()
        self._finished_order: deque[Hashable] = deque()
        self._tq_at: deque[float] = deque()
        self._tq_root: deque[Hashable] = deque()
        self._inits = 0
        self._updates = 0
        self._completed = 0
        self._failed = 0
        self._timed_out = 0
        self._early = 0
        self._unknown_updates = 0
        self._unknown_fails = 0
        self._dup_inits = 0
        self._orphans = 0

    def new_id(self) -> int:
        """A random non-zero 64-bit id for a tuple (or a root)."""
        getrandbits = self._rng.getrandbits
        value = getrandbits(_ID_BITS)
        while not value:
            value = getrandbits(_ID_BITS)
        return value

    # ------------------------------------------------------------- messages

    def init(
        self, root: Hashable, ack_val: int, owner: Hashable, now: float = 0.0
    ) -> AckerEvent | None:
        """The spout emitted ``root`` whose tree starts with ids XORing to ``ack_val``.

        Returns COMPLETE at once if the ack-val is (or, with updates that came
        first, becomes) 0, FAILED if a fail came first, else None.  An init of a
        root that is open or already finished is dropped and counted.
        """
        if isinstance(owner, _NoOwner):
            raise ValueError("owner must be a real owner")
        entry = self._ledger.get(root)
        if entry is None:
            if root in self._finished:
                self._dup_inits += 1
                return None
            self._inits += 1
            if ack_val == 0:
                self._completed += 1
                self._finish(root)
                return AckerEvent(root, owner, AckerEventKind.COMPLETE)
            entry = _Root(ack_val, owner, 0.0)
            self._ledger[root] = entry
            self._arm(root, entry, now)
            return None
        if entry.owner is not _NO_OWNER:
            self._dup_inits += 1
            return None
        self._inits += 1
        entry.owner = owner
        if entry.val is None:
            del self._ledger[root]
            self._failed += 1
            self._finish(root)
            return AckerEvent(root, owner, AckerEventKind.FAILED)
        val = entry.val ^ ack_val
        if val == 0:
            del self._ledger[root]
            self._completed += 1
            self._finish(root)
            return AckerEvent(root, owner, AckerEventKind.COMPLETE)
        entry.val = val
        self._arm(root, entry, now)  # the timeout runs from the init
        return None

    def update(self, root: Hashable, xor_val: int, now: float = 0.0) -> AckerEvent | None:
        """XOR ``xor_val`` into ``root``'s ack-val; COMPLETE when it returns to 0 after init.

        An update of an unknown root opens an entry that waits for the init
        (Storm's ordering); one of a finished root is counted and dropped.
        """
        self._updates += 1
        entry = self._ledger.get(root)
        if entry is None:
            if root in self._finished:
                self._unknown_updates += 1
                return None
            self._early += 1
            entry = _Root(xor_val, _NO_OWNER, 0.0)
            self._ledger[root] = entry
            self._arm(root, entry, now)
            return None
        if entry.val is None:  # failed before its init: the init will report it
            return None
        val = entry.val ^ xor_val
        entry.val = val
        if val == 0 and entry.owner is not _NO_OWNER:
            del self._ledger[root]
            self._completed += 1
            self._finish(root)
            return AckerEvent(root, entry.owner, AckerEventKind.COMPLETE)
        return None

    def fail(self, root: Hashable, now: float = 0.0) -> AckerEvent | None:
        """Fail ``root``'s tree: a FAILED event (the root is removed).

        A fail before the init is kept and reported by the init; one of a
        finished root is counted and dropped.
        """
        entry = self._ledger.get(root)
        if entry is None:
            if root in self._finished:
                self._unknown_fails += 1
                return None
            self._early += 1
            entry = _Root(None, _NO_OWNER, 0.0)
            self._ledger[root] = entry
            self._arm(root, entry, now)
            return None
        if entry.owner is _NO_OWNER:
            entry.val = None
            return None
        del self._ledger[root]
        self._failed += 1
        self._finish(root)
        return AckerEvent(root, entry.owner, AckerEventKind.FAILED)

    def expire(self, now: float) -> list[AckerEvent]:
        """TIMED_OUT for every initialised root whose init is older than ``timeout``.

        A root inited at ``t`` times out once ``now > t + timeout``.  Entries
        still waiting for their init are dropped (counted as orphans): nobody
        is there to tell.  Roots are checked in the order they were armed, so
        the ``now`` passed to ``init``/``update`` should not go backwards (if it
        does, a root may time out late, never early).
        """
        if self._timeout is None:
            return []
        ledger = self._ledger
        tq_at = self._tq_at
        tq_root = self._tq_root
        out: list[AckerEvent] = []
        while tq_at and tq_at[0] < now:
            deadline = tq_at.popleft()
            root = tq_root.popleft()
            entry = ledger.get(root)
            if entry is None or entry.deadline != deadline:
                continue
            del ledger[root]
            if entry.owner is _NO_OWNER:
                self._orphans += 1
                continue
            self._timed_out += 1
            self._finish(root)
            out.append(AckerEvent(root, entry.owner, AckerEventKind.TIMED_OUT))
        return out

    # ------------------------------------------------------------- internals

    def _arm(self, root: Hashable, entry: _Root, now: float) -> None:
        if self._timeout is None:
            return
        entry.deadline = deadline = now + self._timeout
        self._tq_at.append(deadline)
        self._tq_root.append(root)
        if len(self._tq_at) > 2 * len(self._ledger) + 64:
            ledger = self._ledger
            live = [
                (at, r)
                for at, r in zip(self._tq_at, self._tq_root, strict=True)
                if (e := ledger.get(r)) is not None and e.deadline == at
            ]
            self._tq_at = deque(at for at, _ in live)
            self._tq_root = deque(r for _, r in live)

    def _finish(self, root: Hashable) -> None:
        if not self._remember:
            return
        finished = self._finished
        if root in finished:
            return
        finished.add(root)
        order = self._finished_order
        order.append(root)
        if len(order) > self._remember:
            finished.discard(order.popleft())

    # ------------------------------------------------------------- read side

    def is_open(self, root: Hashable) -> bool:
        """True while ``root`` has an entry in the ledger."""
        return root in self._ledger

    def ack_val(self, root: Hashable) -> int | None:
        """The current ack-val of an open root (None if unknown or failed before init)."""
        entry = self._ledger.get(root)
        return None if entry is None else entry.val

    @property
    def stats(self) -> AckerStats:
        return AckerStats(
            inits=self._inits,
            updates=self._updates,
            completed=self._completed,
            failed=self._failed,
            timed_out=self._timed_out,
            early_updates=self._early,
            unknown_updates=self._unknown_updates,
            unknown_fails=self._unknown_fails,
            duplicate_inits=self._dup_inits,
            orphans_expired=self._orphans,
            pending=len(self._ledger),
        )

    def __len__(self) -> int:
        """Open roots in the ledger."""
        return len(self._ledger)
