"""The per-shard in-flight record tracker (after kinesis-storm-spout's InflightRecordTracker).

``emitted`` registers a record handed downstream, ``ack`` marks it done, ``fail``
schedules a retry or, past ``retry_limit``, hands it back once to be dead-lettered (it
stays pending until ``dead_lettered``); ``checkpoint`` is the highest key such that it and
every key emitted before it are done, and never decreases. The contract: docs/tracker.md.

Layout: ``_slot`` maps every key not yet done to its record (insertion order is emit
order; ``len`` is the in-flight count); ``_order`` (:class:`~tracker.layout.EmitOrder`)
is the emit-order array with its head and the checkpoint, collapsed lazily; retries,
deadlines and the cold paths' counters live in :mod:`tracker.retrying`,
:mod:`tracker.timeouts` and :mod:`tracker.counters`. An ack only pops the key; no
per-record Python object is created. Over 400 lines because it is one class that does
one job (its docstring says why).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Iterator
from typing import Generic, cast

from tracker.backoff import Backoff, NoBackoff
from tracker.counters import Counters
from tracker.keys import SequenceKey
from tracker.layout import EmitOrder
from tracker.outcomes import (
    FailAction,
    FailOutcome,
    R,
    RetryItem,
    TrackerStats,
    check_arguments,
)
from tracker.retrying import RetryQueue
from tracker.timeouts import Deadlines

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


class InflightRecordTracker(Generic[R]):
    """Tracks the records of one shard from emit to ack, retry or dead letter.

    ``retry_limit`` is the number of extra deliveries: with 0 the first fail
    gives up, with 3 a record is delivered at most 4 times.  ``max_in_flight``
    only drives ``can_emit`` (back-pressure for new records; ``emitted`` never
    refuses).  ``message_timeout`` (seconds) arms ``expire``.  ``resume_after``
    is the checkpoint a shard resumes from: it is the initial checkpoint, and
    keys up to it count as done.  Pure: time is always an argument, and the
    tracker never reads a clock.

    Not thread-safe: one tracker per shard, used by one thread.

    Why one class of over 300 lines: it does one job, the life of a record
    from emit to done, and its public face (some twenty methods, each with its
    contract) is most of it.  The state of the hot paths (``emitted``,
    ``ack``, ``ack_many``, ``checkpoint``) is its own, one attribute lookup
    away, and so is the logic that ties the parts together; what has state
    and rules of its own is a component it holds: the emit-order array
    (``EmitOrder``), the retry queue, the deadlines and the cold counters.
    The ``_nodes``, ``_keys``, ``_heap``, ``_tq_*`` members are for the tests.
    """

    __slots__ = (
        "_att",
        "_backoff",
        "_counts",
        "_deadlines",
        "_emitted",
        "_given",
        "_latest",
        "_max_in_flight",
        "_order",
        "_retries",
        "_retry_limit",
        "_slot",
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
        self._backoff: Backoff = NoBackoff() if backoff is None else backoff

        # Ordered hash map in emit order (see the module doc).
        self._slot: dict[SequenceKey, object] = {}  # pending key -> record, in emit order
        self._order = EmitOrder(resume_after)  # emitted keys in emit order, and the checkpoint
        self._att: dict[SequenceKey, int] = {}  # deliveries, for keys failed at least once
        # Given up, dead letter not confirmed yet: pending in _slot, no retry, no timeout.
        self._given: set[SequenceKey] = set()
        # A restored checkpoint: keys up to it are done (re-reads of them are ignored).
        self._latest = _LOW if resume_after is None else resume_after
        self._emitted = 0  # new records emitted (the one counter of the hot path)

        self._retries = RetryQueue()
        self._deadlines = None if message_timeout is None else Deadlines(float(message_timeout))
        self._counts = Counters()

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
            self._order.keys.append(key)
            self._emitted += 1
            if self._deadlines is not None:
                self._arm(key, 1, now)
            return True
        return self._emit_known(key, record, now)

    def _emit_known(self, key: SequenceKey, record: R | None, now: float) -> bool:
        if not self._retries.remove(key):  # unknown, in flight or done
            self._counts.ignored_emits += 1
            return False
        # Awaiting a retry: this is the retry.
        deliveries = self._att[key] + 1
        self._att[key] = deliveries
        if record is not None:
            self._slot[key] = record
        self._counts.retried += 1
        if self._deadlines is not None:
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
            self._counts.duplicate_acks += 1
            return False
        if slot.pop(key, _GONE) is _GONE:
            self._counts.bad_ack(key, self._latest)
            return False
        if self._att:
            self._forget(key)
        if len(self._order.keys) > 3 * len(slot) + 64:
            self._order.compact(slot)
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
                    self._counts.duplicate_acks += 1
                    continue
                if slot_pop(key, gone) is gone:
                    self._counts.bad_ack(key, self._latest)
                    continue
                done += 1
                if att:
                    self._forget(key)
        finally:  # keep the map bounded even if a key blows up (e.g. unhashable)
            if len(self._order.keys) > 3 * len(slot) + 64:
                self._order.compact(slot)
        return done

    def _forget(self, key: SequenceKey) -> None:
        """Drop the retry state of a key that just became done (it was failed before)."""
        if self._att.pop(key, None) is not None and self._retries.remove(key):
            self._counts.late_acks += 1

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
            self._counts.ignored_fails += 1
            return FailOutcome(FailAction.IGNORED, key, None, 0, None, error)
        deliveries = max(self._att.get(key, 1), deliveries)
        if key in self._retries or key in self._given:
            self._counts.ignored_fails += 1
            return FailOutcome(FailAction.IGNORED, key, None, deliveries, None, error)
        if give_up or deliveries > self._retry_limit:
            self._counts.given_up += 1
            self._given.add(key)  # pending until the caller confirms its dead letter
            return FailOutcome(FailAction.GIVEN_UP, key, record, deliveries, None, error)
        retry_at = now + self._backoff.delay(deliveries)
        self._att[key] = deliveries
        self._retries.push(key, retry_at)
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
            self._counts.ignored_fails += 1
            return False
        given.remove(key)
        del self._slot[key]
        self._att.pop(key, None)
        if len(self._order.keys) > 3 * len(self._slot) + 64:
            self._order.compact(self._slot)
        return True

    def dead_lettered_many(self, keys: Iterable[SequenceKey]) -> int:
        """``dead_lettered`` for each key; returns how many took effect."""
        confirm = self.dead_lettered
        return sum(1 for key in keys if confirm(key))

    # ---------------------------------------------------------------- retries

    def next_retry(self, now: float = 0.0) -> RetryItem[R] | None:
        """The earliest-due retry whose time has come (ties: emit order), or None.

        Does not mark it emitted: call ``emitted(item.key, item.record, now)``
        when it is handed out.  Until then the same item is returned again.
        """
        entry = self._retries.first()
        if entry is None or entry[0] > now:
            return None
        key = entry[1]
        return RetryItem(key, cast("R | None", self._slot[key]), self._att[key] + 1)

    def next_retry_at(self) -> float | None:
        """When the earliest pending retry becomes due, or None if none is pending."""
        entry = self._retries.first()
        return None if entry is None else entry[0]

    def record_of(self, key: SequenceKey) -> R | None:
        """The record held for pending ``key`` (None: unknown, done, or held without one)."""
        return cast("R | None", self._slot.get(key))

    # --------------------------------------------------------- message timeout

    def expire(self, now: float) -> list[FailOutcome[R]]:
        """Fail every record whose latest delivery is older than ``message_timeout``.

        A delivery at ``t`` expires once ``now > t + message_timeout``.  Each
        expiry is a ``fail`` (RETRY or GIVEN_UP) with a timeout error, counted in
        ``expired``.  A no-op without a timeout.  Deliveries are taken in the
        order they were emitted, so ``now`` passed to ``emitted`` should not go
        backwards (if it does, a record may expire late, never early).
        """
        deadlines = self._deadlines
        if deadlines is None:
            return []
        out: list[FailOutcome[R]] = []
        for key, delivery in deadlines.overdue(now):
            if self._live_delivery(key, delivery):
                self._counts.expired += 1
                out.append(self.fail(key, now, deadlines.error))
        return out

    def _arm(self, key: SequenceKey, delivery: int, now: float) -> None:
        deadlines = self._deadlines
        assert deadlines is not None
        deadlines.arm(key, delivery, now)
        if len(deadlines) > 2 * len(self._slot) + 64:
            deadlines.keep(self._live_delivery)

    def _live_delivery(self, key: SequenceKey, delivery: int) -> bool:
        """True if delivery number ``delivery`` of ``key`` is its latest and still in flight."""
        return (
            key in self._slot
            and key not in self._retries
            and key not in self._given
            and self._att.get(key, 1) == delivery
        )

    # ------------------------------------------------------------- read side

    @property
    def checkpoint(self) -> SequenceKey | None:
        """The highest key such that it and every key emitted before it are done.

        None until the first one is.  Never decreases.  Resume a shard with
        ``AFTER_SEQUENCE_NUMBER`` of it (and skip sub-sequences up to its own).
        """
        order = self._order
        order.advance(self._slot)
        return order.checkpoint

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

    @property
    def stats(self) -> TrackerStats:
        """A snapshot of the counters."""
        return self._counts.snapshot(
            self._emitted, len(self._slot), len(self._retries), len(self), len(self._given)
        )

    def __len__(self) -> int:
        """Entries held in the emit-order key array (at most ``3 * in_flight + 64``)."""
        return len(self._order.keys)

    def __repr__(self) -> str:
        return (
            f"<InflightRecordTracker in_flight={len(self._slot)} nodes={len(self)}"
            f" checkpoint={self._order.checkpoint!s} retries={len(self._retries)}>"
        )

    # ------------------------------------------------------- for the tests

    def _nodes(self) -> list[tuple[SequenceKey, bool]]:
        """The collapsed list, head to tail, as (key, done), after checking the layout."""
        retries = self._retries.keys()
        if not set(self._att) <= self._slot.keys() or not retries <= self._att.keys():
            raise AssertionError("retry state for keys not pending")
        if not self._given <= self._slot.keys() or self._given & retries:
            raise AssertionError("retry state for keys not pending")
        return self._order.nodes(self._slot, self._latest)

    @property
    def _keys(self) -> list[SequenceKey]:
        """The emit-order key array (the tests check it is dropped once drained)."""
        return self._order.keys

    @property
    def _heap(self) -> list[tuple[float, SequenceKey]]:
        """The retry queue's heap, stale entries included (the tests bound its size)."""
        return self._retries.heap

    @property
    def _tq_at(self) -> deque[float]:
        """The deadlines armed, live or not (empty without a timeout; the tests bound it)."""
        return deque() if self._deadlines is None else self._deadlines.at

    @property
    def _tq_key(self) -> deque[SequenceKey]:
        """The keys of the deadlines armed (empty without a timeout)."""
        return deque() if self._deadlines is None else self._deadlines.keys
