"""The in-flight tracker's retry queue: keys awaiting a retry, earliest due first.

A heap of ``(due, key)`` with lazy deletion; ``_live`` maps each key awaiting
its retry to its one live heap entry, so a retry that is handed out or
cancelled by a late ack only leaves a stale entry behind. Stale entries are
recognised by identity (never returned, so none can stall a shard, unlike the
Java original) and compacted once they outnumber the live ones. Keys grow in
emit order, so equal due times break by emit order.
"""

from __future__ import annotations

import heapq

from tracker.keys import SequenceKey

_Entry = tuple[float, SequenceKey]


class RetryQueue:
    """Keys awaiting a retry with their due times; held by one tracker.

    It knows nothing of records or deliveries: the tracker keeps those, and
    asks the queue only what is due and whether a key awaits a retry.
    """

    __slots__ = ("_heap", "_live")

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._live: dict[SequenceKey, _Entry] = {}

    def __len__(self) -> int:
        """Keys awaiting a retry."""
        return len(self._live)

    def __contains__(self, key: object) -> bool:
        return key in self._live

    def keys(self) -> set[SequenceKey]:
        """The keys awaiting a retry (a snapshot, for the layout checks of the tests)."""
        return set(self._live)

    @property
    def heap(self) -> list[_Entry]:
        """The heap itself, stale entries included (its size is bounded; tests check it)."""
        return self._heap

    def push(self, key: SequenceKey, due: float) -> None:
        """Schedule the retry of ``key`` (which awaits none) at ``due``."""
        entry = (due, key)
        heapq.heappush(self._heap, entry)
        self._live[key] = entry

    def remove(self, key: SequenceKey) -> bool:
        """Drop the pending retry of ``key`` (handed out, or cancelled); False if it had none."""
        entry = self._live.pop(key, None)
        if entry is None:
            return False
        heap = self._heap
        if heap[0] is entry:
            heapq.heappop(heap)
        elif len(heap) > 2 * len(self._live) + 32:
            heap[:] = self._live.values()
            heapq.heapify(heap)
        return True

    def first(self) -> _Entry | None:
        """The live ``(due, key)`` due earliest (ties: emit order), or None."""
        heap = self._heap
        live = self._live
        while heap:
            entry = heap[0]
            if live.get(entry[1]) is entry:
                return entry
            heapq.heappop(heap)  # stale: cancelled by a late ack, or already handed out
        return None
