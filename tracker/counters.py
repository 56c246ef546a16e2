"""The in-flight tracker's counters and their snapshot, :class:`TrackerStats`.

A mixin of :class:`~tracker.inflight.InflightRecordTracker` (its state lives there).
"""

from __future__ import annotations

from tracker.keys import SequenceKey
from tracker.outcomes import TrackerStats


class Counters:
    """Counts of what the tracker did and ignored; ``stats`` is their snapshot."""

    # No __slots__ of its own (see tracker.layout): the tracker declares them all.
    _emitted: int
    _retried: int
    _given_up: int
    _dup_acks: int
    _unknown_acks: int
    _late_acks: int
    _ignored_fails: int
    _ignored_emits: int
    _expired: int
    _latest: SequenceKey
    _slot: dict[SequenceKey, object]
    _retry: dict[SequenceKey, tuple[float, SequenceKey]]
    _given: set[SequenceKey]

    def __len__(self) -> int:
        raise NotImplementedError  # the tracker's (tracker.layout)

    @property
    def stats(self) -> TrackerStats:
        """A snapshot of the counters."""
        in_flight = len(self._slot)
        return TrackerStats(
            emitted=self._emitted,
            acked=self._emitted - in_flight - (self._given_up - len(self._given)),
            retried=self._retried,
            given_up=self._given_up,
            duplicate_acks=self._dup_acks,
            unknown_acks=self._unknown_acks,
            ignored_fails=self._ignored_fails,
            ignored_emits=self._ignored_emits,
            expired=self._expired,
            in_flight=in_flight,
            pending_retries=len(self._retry),
            late_acks=self._late_acks,
            nodes=len(self),
            given_up_pending=len(self._given),
        )

    def _bad_ack(self, key: SequenceKey) -> None:
        try:
            duplicate = key <= self._latest
        except TypeError:  # not a key at all
            duplicate = False
        if duplicate:
            self._dup_acks += 1
        else:
            self._unknown_acks += 1
