"""The in-flight tracker's counters of what it retried, gave up, expired and ignored.

Only ``emitted`` is counted on the tracker itself: it is bumped on every emit,
the hottest path, where one attribute less is measurable. These are bumped on
the colder paths (fails, retries, late, duplicate and unknown calls).
"""

from __future__ import annotations

from tracker.keys import SequenceKey
from tracker.outcomes import TrackerStats


class Counters:
    """Counts of one tracker's cold paths; ``snapshot`` makes its :class:`TrackerStats`."""

    __slots__ = (
        "duplicate_acks",
        "expired",
        "given_up",
        "ignored_emits",
        "ignored_fails",
        "late_acks",
        "retried",
        "unknown_acks",
    )

    def __init__(self) -> None:
        self.retried = 0
        self.given_up = 0
        self.duplicate_acks = 0
        self.unknown_acks = 0
        self.late_acks = 0
        self.ignored_fails = 0
        self.ignored_emits = 0
        self.expired = 0

    def bad_ack(self, key: SequenceKey, latest: SequenceKey) -> None:
        """Count an ack that took no effect: duplicate if ``key`` is not after ``latest``."""
        try:
            duplicate = key <= latest
        except TypeError:  # not a key at all
            duplicate = False
        if duplicate:
            self.duplicate_acks += 1
        else:
            self.unknown_acks += 1

    def snapshot(
        self, emitted: int, in_flight: int, pending_retries: int, nodes: int, given_pending: int
    ) -> TrackerStats:
        """These counters with the tracker's own figures, as :class:`TrackerStats`."""
        return TrackerStats(
            emitted=emitted,
            acked=emitted - in_flight - (self.given_up - given_pending),
            retried=self.retried,
            given_up=self.given_up,
            duplicate_acks=self.duplicate_acks,
            unknown_acks=self.unknown_acks,
            ignored_fails=self.ignored_fails,
            ignored_emits=self.ignored_emits,
            expired=self.expired,
            in_flight=in_flight,
            pending_retries=pending_retries,
            late_acks=self.late_acks,
            nodes=nodes,
            given_up_pending=given_pending,
        )
