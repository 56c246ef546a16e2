"""Storm's message timeout for the in-flight tracker.

Every delivery is armed with its deadline in three parallel deques (deadline,
key, delivery number), in the order the deliveries were made; ``expire(now)``
pops the overdue ones and fails those that are still the latest, live delivery
of their key. Entries of deliveries that ended (acked, retried, given up) are
skipped, and compacted away once they outnumber the records in flight. A
mixin of :class:`~tracker.inflight.InflightRecordTracker` (its state lives there).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Generic

from tracker.keys import SequenceKey
from tracker.outcomes import FailOutcome, R


class Timeouts(Generic[R]):
    """Deadlines of deliveries; see the module docstring."""

    # No __slots__ of its own: mypy would refuse assigning the tracker's slots here;
    # the tracker declares them all.
    _timeout: float | None
    _tq_at: deque[float]
    _tq_key: deque[SequenceKey]
    _tq_n: deque[int]
    _expired: int
    _slot: dict[SequenceKey, object]
    _retry: dict[SequenceKey, tuple[float, SequenceKey]]
    _given: set[SequenceKey]
    _att: dict[SequenceKey, int]

    if TYPE_CHECKING:

        def fail(
            self, key: SequenceKey, now: float = 0.0, error: str | None = None
        ) -> FailOutcome[R]:
            raise NotImplementedError


    def _arm(self, key: SequenceKey, delivery: int, now: float) -> None:
        assert self._timeout is not None
        self._tq_at.append(now + self._timeout)
        self._tq_key.append(key)
        self._tq_n.append(delivery)
        if len(self._tq_at) > 2 * len(self._slot) + 64:
            self._compact_timeouts()

    def _live_delivery(self, key: SequenceKey, delivery: int) -> bool:
        """True if delivery number ``delivery`` of ``key`` is its latest and still in flight."""
        return (
            key in self._slot
            and key not in self._retry
            and key not in self._given
            and self._att.get(key, 1) == delivery
        )

    def _compact_timeouts(self) -> None:
        live = [
            item
            for item in zip(self._tq_at, self._tq_key, self._tq_n, strict=True)
            if self._live_delivery(item[1], item[2])
        ]
        self._tq_at = deque(item[0] for item in live)
        self._tq_key = deque(item[1] for item in live)
        self._tq_n = deque(item[2] for item in live)

    def expire(self, now: float) -> list[FailOutcome[R]]:
        """Fail every record whose latest delivery is older than ``message_timeout``.

        A delivery at ``t`` expires once ``now > t + message_timeout``.  Each
        expiry is a ``fail`` (RETRY or GIVEN_UP) with a timeout error, counted in
        ``expired``.  A no-op without a timeout.  Deliveries are taken in the
        order they were emitted, so ``now`` passed to ``emitted`` should not go
        backwards (if it does, a record may expire late, never early).
        """
        timeout = self._timeout
        if timeout is None:
            return []
        tq_at = self._tq_at
        tq_key = self._tq_key
        tq_n = self._tq_n
        error = f"message timeout: not acked within {timeout:g} s"
        out: list[FailOutcome[R]] = []
        while tq_at and tq_at[0] < now:
            tq_at.popleft()
            key = tq_key.popleft()
            if self._live_delivery(key, tq_n.popleft()):
                self._expired += 1
                out.append(self.fail(key, now, error))
        return out
