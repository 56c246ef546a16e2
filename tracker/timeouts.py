"""Storm's message timeout for the in-flight tracker: the deadline of every delivery.

Every delivery is armed with its deadline in three parallel deques (deadline,
key, delivery number), in the order the deliveries were made, so the overdue
ones are at the left end. Entries of deliveries that ended since (acked,
retried, given up) are not removed when they end: the tracker skips them when
they come due, and has them dropped (``keep``) once they outnumber the records
in flight, so memory stays proportional to in-flight even if ``expire`` is
never called.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from tracker.keys import SequenceKey


class Deadlines:
    """The deliveries' deadlines, in delivery order; held by a tracker with a timeout.

    It does not know which deliveries are still live: the tracker tells it,
    through the ``live`` test it passes to ``keep``, and checks each overdue one.
    """

    __slots__ = ("at", "deliveries", "error", "keys", "timeout")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.error = f"message timeout: not acked within {timeout:g} s"
        """The error of the fails an expiry makes."""
        self.at: deque[float] = deque()
        self.keys: deque[SequenceKey] = deque()
        self.deliveries: deque[int] = deque()

    def __len__(self) -> int:
        """Deliveries armed, live or not."""
        return len(self.at)

    def arm(self, key: SequenceKey, delivery: int, now: float) -> None:
        """Delivery number ``delivery`` of ``key`` was made at ``now``."""
        self.at.append(now + self.timeout)
        self.keys.append(key)
        self.deliveries.append(delivery)

    def overdue(self, now: float) -> Iterator[tuple[SequenceKey, int]]:
        """Pop and yield ``(key, delivery)`` of every delivery whose deadline is before ``now``."""
        at = self.at
        keys = self.keys
        deliveries = self.deliveries
        while at and at[0] < now:
            at.popleft()
            yield keys.popleft(), deliveries.popleft()

    def keep(self, live: Callable[[SequenceKey, int], bool]) -> None:
        """Drop every entry whose ``(key, delivery)`` is not ``live`` (O(entries))."""
        kept = [
            item
            for item in zip(self.at, self.keys, self.deliveries, strict=True)
            if live(item[1], item[2])
        ]
        self.at = deque(item[0] for item in kept)
        self.keys = deque(item[1] for item in kept)
        self.deliveries = deque(item[2] for item in kept)
