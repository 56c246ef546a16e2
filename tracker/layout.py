"""The in-flight tracker's emit-order key array: head advance, lazy compaction, checkpoint.

``keys`` is the emit-order array of the emitted keys (done or not) from
``head`` on (the earliest pointer: no entry before it is pending). Whether an
entry is done is not kept here: it is done when its key is no longer in the
tracker's map of pending keys, passed to each call as ``pending``, so an ack
touches only that map. ``advance`` moves the head over done entries; the
checkpoint is the key of the last done entry it passed.

Done runs collapse lazily, by the rule of the kinesis-storm-spout ack table (a
run of done keys is represented by its last key): when the array holds more
than ``3 * in_flight + 64`` entries the tracker calls ``compact``, which keeps
only the pending keys, the last key of each done run between them (the
checkpoint once the head reaches the next pending key) and the latest key, so
at most ``2 * in_flight + 1`` entries remain; the array is dropped when the
tracker drains. ``nodes`` derives that collapsed list for the tests.
"""

from __future__ import annotations

import itertools
from itertools import compress, count, islice

from tracker.keys import SequenceKey


class EmitOrder:
    """Emitted keys in emit order from the earliest that may be pending, and the checkpoint.

    The tracker appends to ``keys`` itself on every emit (the hot path) and
    reads ``len(keys)`` to decide when to compact; it never rebinds either.
    """

    __slots__ = ("checkpoint", "head", "keys")

    def __init__(self, checkpoint: SequenceKey | None) -> None:
        self.keys: list[SequenceKey] = []
        self.head = 0
        self.checkpoint = checkpoint
        """The key of the last done entry the head passed (or the restored one)."""

    def advance(self, pending: dict[SequenceKey, object]) -> None:
        """Move the head over the done entries; the checkpoint is the last one passed."""
        keys = self.keys
        head = self.head
        if head < len(keys) and keys[head] not in pending:
            # The first pending entry at or after head (at C speed), or the end.
            found = compress(count(head), map(pending.__contains__, islice(keys, head, None)))
            head = next(found, len(keys))
            self.checkpoint = keys[head - 1]
            if head == len(keys):  # drained: drop the array, so memory follows in-flight
                self.keys = []
                head = 0
            self.head = head

    def compact(self, pending: dict[SequenceKey, object]) -> None:
        """Collapse the done runs of ``keys`` (O(entries), amortised O(1) per emit).

        Keeps the pending keys, the last key of each done run between them (the
        checkpoint once the head reaches the next pending key) and the latest
        key; drops the rest, and everything before the head.  That leaves at
        most ``2 * in_flight + 1`` entries.  Called when ``keys`` holds more
        than ``3 * in_flight + 64``, so more than a third of it goes: the cost
        is paid for by the emits of the entries dropped, and memory stays
        proportional to in-flight.  The pending map holds no positions: untouched.
        """
        if not pending:  # drained: every key up to the latest (the last entry) is done
            if self.keys:
                self.checkpoint = self.keys[-1]
            self.keys = []
            self.head = 0
            return
        self.advance(pending)
        rest = self.keys[self.head :]
        n = len(rest)
        # keep[j] = pending[j] or pending[j + 1] (bytewise, at C speed), and the last one.
        bits = int.from_bytes(bytes(map(pending.__contains__, rest)), "little")
        keep = bytearray((bits | (bits >> 8)).to_bytes(n, "little"))
        keep[n - 1] = 1
        self.keys = list(compress(rest, keep))
        self.head = 0

    def nodes(
        self, pending: dict[SequenceKey, object], latest: SequenceKey
    ) -> list[tuple[SequenceKey, bool]]:
        """The collapsed list, head to tail, as (key, done), after checking the layout.

        Every pending key, plus the last key of each run of done keys after the
        first pending one (the run's representative), derived from the array.
        ``pending`` must be in emit order (the tracker's dict is).  For tests.
        """
        self.advance(pending)
        keys = self.keys
        n = len(keys)
        if n > 3 * len(pending) + 64:
            raise AssertionError(f"{n} entries for {len(pending)} in flight")
        if any(a >= b for a, b in itertools.pairwise(keys)):
            raise AssertionError("keys not in emit order")
        if keys and keys[-1] != latest:
            raise AssertionError(f"last entry {keys[-1]} is not the latest {latest}")
        if self.head and self.checkpoint != keys[self.head - 1]:
            raise AssertionError(f"checkpoint {self.checkpoint} != {keys[self.head - 1]}")
        out: list[tuple[SequenceKey, bool]] = []
        for key in keys[self.head :]:
            if key in pending:
                out.append((key, False))
            elif out[-1][1]:
                out[-1] = (key, True)
            else:
                out.append((key, True))
        if [key for key, done in out if not done] != list(pending):
            raise AssertionError("the dict does not hold exactly the pending entries, in order")
        return out
