"""The in-flight tracker's emit-order layout: head advance and lazy compaction.

``_keys`` is the emit-order array of emitted keys (done or not) from ``_head``
on; an entry is done when its key is no longer in ``_slot``. Reading the
checkpoint advances the head over done entries; when the array outgrows
``3 * in_flight + 64`` a compaction keeps only the pending keys, the last key
of each done run between them and the latest key (see the module docstring of
:mod:`tracker.inflight`). ``_nodes`` derives the logical list for the tests.
A mixin of :class:`~tracker.inflight.InflightRecordTracker`.
"""

from __future__ import annotations

import itertools
from itertools import compress, count, islice

from tracker.keys import SequenceKey


class Layout:
    """Head advance, compaction and the derived list; see the module docstring."""

    # No __slots__ of its own: mypy would refuse assigning the tracker's slots here;
    # the tracker declares them all.
    _keys: list[SequenceKey]
    _head: int
    _slot: dict[SequenceKey, object]
    _checkpoint: SequenceKey | None
    _latest: SequenceKey
    _att: dict[SequenceKey, int]
    _retry: dict[SequenceKey, tuple[float, SequenceKey]]
    _given: set[SequenceKey]


    def _advance(self) -> None:
        """Move the head over the done entries; the checkpoint is the last one passed."""
        keys = self._keys
        head = self._head
        if head < len(keys) and keys[head] not in self._slot:
            # The first pending entry at or after head (at C speed), or the end.
            pending = compress(count(head), map(self._slot.__contains__, islice(keys, head, None)))
            head = next(pending, len(keys))
            self._checkpoint = keys[head - 1]
            if head == len(keys):  # drained: drop the array, so memory follows in-flight
                self._keys = []
                head = 0
            self._head = head

    def _compact(self) -> None:
        """Collapse the done runs of ``_keys`` (O(entries), amortised O(1) per emit).

        Keeps the pending keys, the last key of each done run between them (the
        checkpoint once the head reaches the next pending key) and the latest
        key; drops the rest, and everything before the head.  That leaves at
        most ``2 * in_flight + 1`` entries.  Called when ``_keys`` holds more
        than ``3 * in_flight + 64``, so more than a third of it goes: the cost
        is paid for by the emits of the entries dropped, and memory stays
        proportional to in-flight.  The dict holds no positions: untouched.
        """
        slot = self._slot
        if not slot:  # drained: every key up to the latest is done
            if self._keys:
                self._checkpoint = self._latest
            self._keys = []
            self._head = 0
            return
        self._advance()
        rest = self._keys[self._head :]
        n = len(rest)
        # keep[j] = pending[j] or pending[j + 1] (bytewise, at C speed), and the last one.
        bits = int.from_bytes(bytes(map(slot.__contains__, rest)), "little")
        keep = bytearray((bits | (bits >> 8)).to_bytes(n, "little"))
        keep[n - 1] = 1
        self._keys = list(compress(rest, keep))
        self._head = 0

    def __len__(self) -> int:
        """Entries held in the emit-order key array (at most ``3 * in_flight + 64``)."""
        return len(self._keys)

    def _nodes(self) -> list[tuple[SequenceKey, bool]]:
        """The logical list, head to tail, as (key, done), after checking the layout; for tests.

        Every pending key, plus the last key of each run of done keys after the
        first pending one (the run's representative), derived from the arrays.
        """
        self._advance()
        keys = self._keys
        slot = self._slot
        n = len(keys)
        if n > 3 * len(slot) + 64:
            raise AssertionError(f"{n} entries for {len(slot)} in flight")
        if any(a >= b for a, b in itertools.pairwise(keys)):
            raise AssertionError("keys not in emit order")
        if keys and keys[-1] != self._latest:
            raise AssertionError(f"last entry {keys[-1]} is not the latest {self._latest}")
        if self._head and self._checkpoint != keys[self._head - 1]:
            raise AssertionError(f"checkpoint {self._checkpoint} != {keys[self._head - 1]}")
        if not set(self._att) <= slot.keys() or not set(self._retry) <= self._att.keys():
            raise AssertionError("retry state for keys not pending")
        if not self._given <= slot.keys() or self._given & self._retry.keys():
            raise AssertionError("retry state for keys not pending")
        out: list[tuple[SequenceKey, bool]] = []
        for key in keys[self._head :]:
            if key in slot:
                out.append((key, False))
            elif out[-1][1]:
                out[-1] = (key, True)
            else:
                out.append((key, True))
        if [key for key, done in out if not done] != list(slot):
            raise AssertionError("the dict does not hold exactly the pending entries, in order")
        return out
