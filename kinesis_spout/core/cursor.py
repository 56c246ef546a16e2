"""Where a shard read elsewhere goes on, and when it may be read again.

A reader whose shards are read by others (the Spark job's driver: its read tasks read
on the executors) keeps no getter per shard, only a :class:`ShardCursor`: the position
the next read starts from, and the pacing a getter keeps in the spout's own loop (a
shard at its tip waits ``empty_shard_backoff``, doubled for each further empty read up
to ``empty_shard_backoff_max``; a throttled read waits ``throttle_backoff``; a read that
failed waits a growing backoff). A read's end moves it on (:meth:`ShardCursor.advance`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kinesis_spout.records import GetterPosition, ReadEnd

NEVER = math.inf


@dataclass(frozen=True, slots=True)
class Pacing:
    """The waits of a shard between reads (from the config)."""

    empty_shard_backoff: float
    empty_shard_backoff_max: float
    throttle_backoff: float
    failure_backoff_max: float = 60.0
    """The longest wait after reads that failed in a row (doubling from ``throttle_backoff``)."""

    def idle(self, empty_reads: int) -> float:
        """The wait after ``empty_reads`` reads in a row found nothing at the tip."""
        grown = self.empty_shard_backoff * 2.0 ** min(max(empty_reads - 1, 0), 32)
        return min(grown, max(self.empty_shard_backoff_max, self.empty_shard_backoff))

    def failed(self, failures: int) -> float:
        """The wait after ``failures`` failed reads in a row."""
        return min(self.throttle_backoff * 2.0 ** min(failures, 32), self.failure_backoff_max)


class ShardCursor:
    """A shard read elsewhere: its next read's position and time (see the module)."""

    __slots__ = (
        "position",
        "next_poll_at",
        "early_by",
        "caught_up",
        "behind",
        "ended",
        "_pacing",
        "_empty",
        "_failures",
    )

    def __init__(self, position: GetterPosition, pacing: Pacing) -> None:
        self.position = position
        self.next_poll_at = -NEVER
        self.early_by = 0.0
        """How early a shard waiting at its tip may join a micro-batch that runs anyway
        (half its wait), so idle shards poll together, not each in a job of its own."""
        self.caught_up = False
        self.behind: int | None = None
        self.ended = False
        self._pacing = pacing
        self._empty = 0
        self._failures = 0

    def due(self, now: float, early: bool = False) -> bool:
        """The shard may be read at ``now`` (``early``: or within its early margin)."""
        return not self.ended and now + (self.early_by if early else 0.0) >= self.next_poll_at

    def advance(self, end: ReadEnd, now: float) -> None:
        """A read ended with ``end``: the next one starts where it stopped, now, or after
        the shard's idle or throttle wait."""
        if end.position is not None:
            self.position = end.position
        self.ended = self.ended or end.ended
        self.behind = end.behind
        self.caught_up = end.caught_up
        self._failures = 0
        self.early_by = 0.0
        if self.ended:
            self.next_poll_at = NEVER
        elif not end.taken and end.errors and not end.events:
            self.next_poll_at = now + self._pacing.throttle_backoff
        elif end.caught_up:
            self._empty = 0 if end.taken else self._empty + 1
            wait = self._pacing.empty_shard_backoff if end.taken else self._pacing.idle(self._empty)
            self.next_poll_at = now + wait
            self.early_by = wait / 2
        else:
            if end.taken or end.skipped or end.corrupt:
                self._empty = 0
            self.next_poll_at = now

    def failed(self, now: float) -> float:
        """A read of the shard failed (not a record: access denied, a KMS key): it waits a
        growing backoff; the wait."""
        self._failures += 1
        wait = self._pacing.failed(self._failures)
        self.next_poll_at = now + wait
        return wait

    def drop_iterator(self) -> None:
        """Forget the iterator (a read left it unusable): the next read opens a new one."""
        pos = self.position
        self.position = GetterPosition(None, pos.after, pos.after_whole, pos.initial, pos.timestamp)
