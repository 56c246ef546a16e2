"""The per-shard in-flight record tracker (after kinesis-storm-spout's InflightRecordTracker).

Contract in a few lines (details in ``docs/tracker.md``):

* ``emitted`` registers a record handed downstream.  New keys arrive in
  increasing order; a new key not greater than the latest key ever emitted is a
  re-read duplicate, ignored and counted.  Emitting a key that awaits a retry is
  that retry.
* ``ack`` marks a record done.  ``fail`` schedules a retry (``retry_at = now +
  backoff.delay(deliveries)``) or, after ``retry_limit`` retries, gives the
  record up: it is handed back once, in the outcome, so the caller can
  dead-letter it, and it stays pending (it blocks the checkpoint, is neither
  retried nor expired again) until the caller confirms the durable
  dead-letter write with ``dead_lettered``; only then is it done.
* ``checkpoint`` is the highest key such that it and every key emitted before
  it are done.  It never decreases.
* Late, duplicate and unknown acks/fails/emits are counted, never raised.

Layout.  An ordered hash map in emit order, kept lazily.  ``_slot`` maps the
key of every record not yet done (in flight or awaiting a retry) to its
record, so ``len(_slot)`` is the in-flight count and its insertion order is
emit order.  ``_keys`` is the emit-order array of emitted keys (done or not)
from ``_head`` (the earliest pointer: no entry before it is pending) on;
``_latest`` is the greatest key ever emitted.  An entry is done when its key is
no longer in ``_slot``.  Deliveries are 1 unless the key is in ``_att`` (keys
failed at least once); a key awaits a retry when it is in ``_retry``.  No
per-record Python object is created and nothing here feeds the cyclic
garbage collector.

Ack: pop the key from ``_slot`` (and from ``_att``/``_retry`` if it was ever
failed), nothing else.  Reading ``checkpoint`` advances the head over the done
entries (amortised O(1) each, at C speed); the checkpoint is the key of the
last done entry it passed.  Done runs collapse lazily: when ``_keys`` holds
more than ``3 * in_flight + 64`` entries, a compaction keeps only the pending
keys, the last key of each done run between them (its representative: the
checkpoint once the head reaches the next pending key) and the latest key, so
at most ``2 * in_flight + 1`` entries remain and memory stays proportional to
the records in flight (the array is dropped when the tracker has drained).
The dict never holds positions, so a compaction never touches it.  The
logical list (every pending key, plus the last key of each done run between
them) is what ``_nodes()`` derives for the tests.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable, Iterable, Iterator
from typing import Generic, cast

from tracker.backoff import Backoff, NoBackoff
from tracker.counters import Counters
from tracker.keys import SequenceKey
from tracker.layout import Layout
from tracker.outcomes import (
    FailAction,
    FailOutcome,
    R,
    RetryItem,
    TrackerStats,
    check_arguments,
)
from tracker.retrying import RetryQueue
from tracker.timeouts import Timeouts

__all__ = [
    "FailAction",
    "FailOutcome",
    "InflightRecordTracker",
    "RetryItem",
    "TrackerStats",
]

# Below every valid key (sequence and sub-sequence are >= 0): the "latest emitted" at start.
_LOW = SequenceKey(-1, -1)
# A missing record (records may be None).
_GONE: object = object()


class InflightRecordTracker(RetryQueue[R], Timeouts[R], Layout, Counters, Generic[R]):
    """Tracks the records of one shard from emit to ack, retry or dead letter.

    ``retry_limit`` is the number of extra deliveries: with 0 the first fail
    gives up, with 3 a record is delivered at most 4 times.  ``max_in_flight``
    only drives ``can_emit`` (back-pressure for new records; ``emitted`` never
    refuses).  ``message_timeout`` (seconds) arms ``expire``.  ``resume_after``
    is the checkpoint a shard resumes from: it is the initial checkpoint, and
    keys up to it count as done.  Pure: time is always an argument, and the
    tracker never reads a clock.

    Not thread-safe: one tracker per shard, used by one thread.
    """

    __slots__ = (
        "_att",
        "_backoff",
        "_checkpoint",
        "_dup_acks",
        "_emitted",
        "_expired",
        "_given",
        "_given_up",
        "_head",
        "_heap",
        "_ignored_emits",
        "_ignored_fails",
        "_keys",
        "_late_acks",
        "_latest",
        "_max_in_flight",
        "_retried",
        "_retry",
        "_retry_limit",
        "_slot",
        "_timeout",
        "_tq_at",
        "_tq_key",
        "_tq_n",
        "_unknown_acks",
    )

    def __init__(
        self,
        retry_limit: int,
        max_in_flight: int | None = None,
        message_timeout: float | None = None,
        backoff: Backoff | None = None,
        *,
        resume_after: SequenceKey | None = None,
    ) -> None:
        check_arguments(retry_limit, max_in_flight, message_timeout, backoff, resume_after)
        self._retry_limit = retry_limit
        self._max_in_flight = max_in_flight
        self._timeout: float | None = None if message_timeout is None else float(message_timeout)
        self._backoff: Backoff = NoBackoff() if backoff is None else backoff

        # Ordered hash map in emit order (see the module doc).
        self._slot: dict[SequenceKey, object] = {}  # pending key -> record, in emit order
        self._keys: list[SequenceKey] = []  # emitted keys in emit order, from _head on
        self._head = 0  # the earliest entry that may be pending
        self._att: dict[SequenceKey, int] = {}  # deliveries, for keys failed at least once
        # Given up, dead letter not confirmed yet: pending in _slot, no retry, no timeout.
        self._given: set[SequenceKey] = set()
        # A restored checkpoint: keys up to it are done (re-reads of them are ignored).
        self._latest = _LOW if resume_after is None else resume_after
        self._checkpoint: SequenceKey | None = resume_after

        # Retries: a heap of (due, key) with lazy deletion; _retry holds the live entry per key.
        # Keys grow in emit order, so (due, key) ties break by emit order.
        self._heap: list[tuple[float, SequenceKey]] = []
        self._retry: dict[SequenceKey, tuple[float, SequenceKey]] = {}

        # Message timeout: deliveries in time order, (deadline, key, delivery number)
        # in three parallel deques.
        self._tq_at: deque[float] = deque()
        self._tq_key: deque[SequenceKey] = deque()
        self._tq_n: deque[int] = deque()

        self._emitted = 0
        self._retried = 0
        self._given_up = 0
        self._dup_acks = 0
        self._unknown_acks = 0
        self._late_acks = 0
        self._ignored_fails = 0
        self._ignored_emits = 0
        self._expired = 0

    # ------------------------------------------------------------------ emit

    def emitted(self, key: SequenceKey, record: R | None = None, now: float = 0.0) -> bool:
        """Register ``record`` as handed downstream at time ``now``; True if it took effect.

        A new key must be greater than every key emitted before; a key awaiting
        a retry is that retry (``record`` replaces the stored one unless None).
        Anything else (a re-read duplicate, a key in flight or done) is ignored,
        counted in ``ignored_emits``, and returns False.
        """
        if key > self._latest:
            self._latest = key
            self._slot[key] = record
            self._keys.append(key)
            self._emitted += 1
            if self._timeout is not None:
                self._arm(key, 1, now)
            return True
        return self._emit_known(key, record, now)

    def _emit_known(self, key: SequenceKey, record: R | None, now: float) -> bool:
        entry = self._retry.pop(key, None)
        if entry is None:  # unknown, in flight or done
            self._ignored_emits += 1
            return False
        # Awaiting a retry: this is the retry.
        heap = self._heap
        if heap[0] is entry:
            heapq.heappop(heap)
        else:
            self._maybe_compact_heap()
        deliveries = self._att[key] + 1
        self._att[key] = deliveries
        if record is not None:
            self._slot[key] = record
        self._retried += 1
        if self._timeout is not None:
            self._arm(key, deliveries, now)
        return True

    # ------------------------------------------------------------------- ack

    def ack(self, key: SequenceKey) -> bool:
        """Mark ``key`` done; True if it took effect.

        An ack of a record awaiting its retry is a late ack: the record is done
        and the retry cancelled.  Unknown and duplicate acks (including acks of
        a record already given up, whose dead letter alone makes it done)
        return False and are counted.
        """
        slot = self._slot
        if self._given and key in self._given:  # its dead letter decides, not an ack
            self._dup_acks += 1
            return False
        if slot.pop(key, _GONE) is _GONE:
            self._bad_ack(key)
            return False
        if self._att:
            self._forget(key)
        if len(self._keys) > 3 * len(slot) + 64:
            self._compact()
        return True

    def ack_many(self, keys: Iterable[SequenceKey]) -> int:
        """Ack every key in ``keys`` (a micro-batch); returns how many took effect.

        Same semantics as calling ``ack`` on each key in turn, written as one
        tight loop.
        """
        slot = self._slot
        slot_pop = slot.pop
        att = self._att
        given = self._given
        gone = _GONE
        done = 0
        try:
            for key in keys:
                if given and key in given:
                    self._dup_acks += 1
                    continue
                if slot_pop(key, gone) is gone:
                    self._bad_ack(key)
                    continue
                done += 1
                if att:
                    self._forget(key)
        finally:  # keep the map bounded even if a key blows up (e.g. unhashable)
            if len(self._keys) > 3 * len(slot) + 64:
                self._compact()
        return done

    def _forget(self, key: SequenceKey) -> None:
        """Drop the retry state of a key that just became done (it was failed before)."""
        if self._att.pop(key, None) is not None and key in self._retry:
            del self._retry[key]
            self._late_acks += 1
            self._maybe_compact_heap()

    # ------------------------------------------------------------------ fail

    def fail(
        self,
        key: SequenceKey,
        now: float = 0.0,
        error: str | None = None,
        *,
        deliveries: int = 0,
        give_up: bool = False,
    ) -> FailOutcome[R]:
        """Fail the latest delivery of ``key``: schedule its retry or give it up.

        Returns RETRY with ``retry_at``, GIVEN_UP with the record (handed back once,
        to be dead-lettered; pending until ``dead_lettered``), or IGNORED (counted):
        unknown or done key, already awaiting its retry, or already given up.
        ``deliveries``: those the caller made (it retried the record itself);
        ``give_up``: give it up whatever its count (e.g. too old).
        """
        record = cast("R | None", self._slot.get(key, _GONE))
        if record is _GONE:
            self._ignored_fails += 1
            return FailOutcome(FailAction.IGNORED, key, None, 0, None, error)
        deliveries = max(self._att.get(key, 1), deliveries)
        if key in self._retry or key in self._given:
            self._ignored_fails += 1
            return FailOutcome(FailAction.IGNORED, key, None, deliveries, None, error)
        if give_up or deliveries > self._retry_limit:
            self._given_up += 1
            self._given.add(key)  # pending until the caller confirms its dead letter
            return FailOutcome(FailAction.GIVEN_UP, key, record, deliveries, None, error)
        retry_at = now + self._backoff.delay(deliveries)
        self._att[key] = deliveries
        entry = (retry_at, key)
        heapq.heappush(self._heap, entry)
        self._retry[key] = entry
        return FailOutcome(FailAction.RETRY, key, record, deliveries, retry_at, error)

    def fail_many(
        self, items: Iterable[tuple[SequenceKey, str | None]], now: float = 0.0
    ) -> list[FailOutcome[R]]:
        """``fail(key, now, error)`` for each ``(key, error)``; the outcomes in order."""
        fail = self.fail
        return [fail(key, now, error) for key, error in items]

    def dead_lettered(self, key: SequenceKey) -> bool:
        """Confirm that given-up ``key``'s dead letter is durably written: it is now done.

        False (counted as an ignored fail) for a key that is not given up and
        pending: unknown, in flight, done, or confirmed before.
        """
        given = self._given
        if key not in given:
            self._ignored_fails += 1
            return False
        given.remove(key)
        del self._slot[key]
        self._att.pop(key, None)
        if len(self._keys) > 3 * len(self._slot) + 64:
            self._compact()
        return True

    def dead_lettered_many(self, keys: Iterable[SequenceKey]) -> int:
        """``dead_lettered`` for each key; returns how many took effect."""
        confirm = self.dead_lettered
        return sum(1 for key in keys if confirm(key))

    # ---------------------------------------------------------------- retries

    # ------------------------------------------------------------- read side

    @property
    def checkpoint(self) -> SequenceKey | None:
        """The highest key such that it and every key emitted before it are done.

        None until the first one is.  Never decreases.  Resume a shard with
        ``AFTER_SEQUENCE_NUMBER`` of it (and skip sub-sequences up to its own).
        """
        self._advance()
        return self._checkpoint

    @property
    def latest(self) -> SequenceKey | None:
        """The greatest key ever emitted, or None."""
        return None if self._latest is _LOW else self._latest

    @property
    def in_flight(self) -> int:
        """Records emitted and not yet done, including those awaiting a retry."""
        return len(self._slot)

    @property
    def can_emit(self) -> bool:
        """True while ``in_flight < max_in_flight`` (always without a bound)."""
        limit = self._max_in_flight
        return limit is None or len(self._slot) < limit

    def pending(self) -> Iterator[SequenceKey]:
        """The keys not yet done, in emit order (a snapshot, for debugging and tests)."""
        return iter(list(self._slot))

    def is_pending(self, key: Hashable) -> bool:
        """True if ``key`` is in flight or awaiting a retry."""
        return key in self._slot

    def __repr__(self) -> str:
        return (
            f"<InflightRecordTracker in_flight={len(self._slot)} nodes={len(self)}"
            f" checkpoint={self._checkpoint!s} retries={len(self._retry)}>"
        )
