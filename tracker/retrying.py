"""The retry queue of the in-flight tracker.

A heap of ``(due, key)`` with lazy deletion; ``_retry`` maps each key awaiting
its retry to its live heap entry, so a retry cancelled by a late ack (or
handed out) just leaves a stale entry that is skipped and, once stale entries
outnumber the live ones, compacted. Keys grow in emit order, so equal due
times break by emit order. A mixin of
:class:`~tracker.inflight.InflightRecordTracker` (its state lives there).
"""

from __future__ import annotations

import heapq
from typing import Generic, cast

from tracker.keys import SequenceKey
from tracker.outcomes import R, RetryItem


class RetryQueue(Generic[R]):
    """Due retries, earliest first (ties: emit order)."""

    # No __slots__ of its own: mypy would refuse assigning the tracker's slots here;
    # the tracker declares them all.
    _heap: list[tuple[float, SequenceKey]]
    _retry: dict[SequenceKey, tuple[float, SequenceKey]]
    _att: dict[SequenceKey, int]
    _slot: dict[SequenceKey, object]

    def _retry_top(self) -> tuple[float, SequenceKey] | None:
        heap = self._heap
        retry = self._retry
        while heap:
            entry = heap[0]
            if retry.get(entry[1]) is entry:
                return entry
            heapq.heappop(heap)  # stale: acked late, or already re-emitted
        return None

    def next_retry(self, now: float = 0.0) -> RetryItem[R] | None:
        """The earliest-due retry whose time has come (ties: emit order), or None.

        Does not mark it emitted: call ``emitted(item.key, item.record, now)``
        when it is handed out.  Until then the same item is returned again.
        """
        entry = self._retry_top()
        if entry is None or entry[0] > now:
            return None
        key = entry[1]
        return RetryItem(key, cast("R | None", self._slot[key]), self._att[key] + 1)

    def record_of(self, key: SequenceKey) -> R | None:
        """The record held for pending ``key`` (None: unknown, done, or held without one)."""
        return cast("R | None", self._slot.get(key))

    def next_retry_at(self) -> float | None:
        """When the earliest pending retry becomes due, or None if none is pending."""
        entry = self._retry_top()
        return None if entry is None else entry[0]

    def _maybe_compact_heap(self) -> None:
        heap = self._heap
        if len(heap) > 2 * len(self._retry) + 32:
            heap[:] = self._retry.values()
            heapq.heapify(heap)
