"""The per-shard in-flight record tracker (after kinesis-storm-spout's InflightRecordTracker).

Contract in a few lines (details in ``docs/tracker.md``):

* ``emitted`` registers a record handed downstream.  New keys arrive in
  increasing order; a new key not greater than the latest key ever emitted is a
  re-read duplicate, ignored and counted.  Emitting a key that awaits a retry is
  that retry.
* ``ack`` marks a record done.  ``fail`` schedules a retry (``retry_at = now +
  backoff.delay(deliveries)``) or, after ``retry_limit`` retries, gives the
  record up: it then counts as done and is handed back once, in the outcome, so
  the caller can dead-letter it.
* ``checkpoint`` is the highest key such that it and every key emitted before
  it are done.  It never decreases.
* Late, duplicate and unknown acks/fails/emits are counted, never raised.

Layout.  Nodes live in parallel lists indexed by a slot number (``_prev``,
``_next``, ``_att``, ``_rec``) with a free list, so a node costs no Python
object of its own and nothing here feeds the cyclic garbage collector.  The
nodes form a doubly linked list in emit order.  ``_slot`` maps the key of every
record not yet done (in flight or awaiting a retry) to its slot, so
``len(_slot)`` is the in-flight count and its insertion order is emit order.

``_att[i]`` is the node's state: ``> 0`` in flight (the number of deliveries so
far), ``< 0`` awaiting a retry (minus the deliveries so far), ``0`` done.  A
done node stays only as the *representative* of a run of done keys: it is the
last key of the run and ``_rec[i]`` holds that key.  The ack table below
keeps that invariant, so no two done nodes are adjacent and the head is never
a done node: the node count is at most ``2 * in_flight``.

Ack table for the node X that becomes done (P/N: previous/next node)::

                     N done             N pending         N absent
    P done           drop X, drop P     keep X, drop P    keep X, drop P
    P pending        drop X             keep X            keep X
    P absent (head)  drop X, drop N,    drop X,           drop X,
                     checkpoint = N     checkpoint = X    checkpoint = X

Dropping X when N is done lets N (the later key) represent the merged run;
dropping P when P is done lets X represent it.  Only the head's removal moves
the checkpoint, and a removed tail only ever happens when the list empties.
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from tracker.backoff import Backoff, NoBackoff
from tracker.keys import SequenceKey

__all__ = [
    "FailAction",
    "FailOutcome",
    "InflightRecordTracker",
    "RetryItem",
    "TrackerStats",
]

R = TypeVar("R")

# Below every valid key (sequence and sub-sequence are >= 0): the "latest emitted" at start.
_LOW = SequenceKey(-1, -1)
# Release the slot lists when the tracker drains empty and they hold more than this.
_RELEASE_AT = 4096


class FailAction(enum.Enum):
    """What a ``fail`` (or an expiry) did."""

    RETRY = "retry"
    """A retry is scheduled at ``retry_at``; ``next_retry`` will hand it out."""
    GIVEN_UP = "given_up"
    """The retry limit is spent: the record is done and handed back to be dead-lettered."""
    IGNORED = "ignored"
    """Unknown key, already done, or already awaiting its retry: nothing changed."""


@dataclass(frozen=True, slots=True)
class FailOutcome(Generic[R]):
    """The result of one ``fail``."""

    action: FailAction
    key: SequenceKey
    record: R | None
    """The record (for RETRY and GIVEN_UP); a GIVEN_UP record is returned exactly once."""
    attempts: int
    """Deliveries so far (0 for an unknown or done key)."""
    retry_at: float | None
    """When the retry becomes due (RETRY only)."""
    error: str | None
    """The error passed to ``fail`` (or the timeout message for an expiry)."""


@dataclass(frozen=True, slots=True)
class RetryItem(Generic[R]):
    """A retry that is due: hand ``record`` out again and call ``emitted(key, ...)``."""

    key: SequenceKey
    record: R | None
    attempt: int
    """The delivery number this retry will be: 2 for the first retry."""


@dataclass(frozen=True, slots=True)
class TrackerStats:
    """A snapshot of the tracker's counters."""

    emitted: int
    """New records emitted (first deliveries)."""
    acked: int
    """Records that became done by an ack (including late acks)."""
    retried: int
    """Retry deliveries (emits of a key that awaited a retry)."""
    given_up: int
    """Records that ran out of retries (handed back for the dead-letter sink)."""
    duplicate_acks: int
    """Acks of a key not tracked and not after the latest emitted key: already done."""
    unknown_acks: int
    """Acks of a key after the latest emitted key (never emitted)."""
    ignored_fails: int
    """Fails of a key that is unknown, done or already awaiting its retry."""
    ignored_emits: int
    """Emits of a key already in flight or done, or a re-read key not after the latest."""
    expired: int
    """Deliveries failed by ``expire`` (message timeout)."""
    in_flight: int
    """Records emitted and not yet done (including those awaiting a retry)."""
    pending_retries: int
    """Records awaiting a retry."""
    late_acks: int = 0
    """Acks of a record awaiting its retry: done, the retry is cancelled (part of ``acked``)."""
    nodes: int = 0
    """Internal list nodes (at most twice ``in_flight``)."""


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
    """

    __slots__ = (
        "_att",
        "_backoff",
        "_checkpoint",
        "_dl",
        "_dup_acks",
        "_emitted",
        "_expired",
        "_free",
        "_given_up",
        "_head",
        "_heap",
        "_ignored_emits",
        "_ignored_fails",
        "_late_acks",
        "_latest",
        "_max_in_flight",
        "_next",
        "_prev",
        "_rec",
        "_retried",
        "_retry",
        "_retry_limit",
        "_slot",
        "_tail",
        "_timeout",
        "_tq_at",
        "_tq_key",
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
        if isinstance(retry_limit, bool) or not isinstance(retry_limit, int) or retry_limit < 0:
            raise ValueError(f"retry_limit must be an int >= 0, got {retry_limit!r}")
        if max_in_flight is not None and (
            isinstance(max_in_flight, bool)
            or not isinstance(max_in_flight, int)
            or max_in_flight < 1
        ):
            raise ValueError(f"max_in_flight must be None or an int >= 1, got {max_in_flight!r}")
        if message_timeout is not None and (
            isinstance(message_timeout, bool)
            or not isinstance(message_timeout, int | float)
            or not 0 < message_timeout < float("inf")
        ):
            raise ValueError(
                f"message_timeout must be None or a finite number > 0, got {message_timeout!r}"
            )
        if backoff is not None and not callable(getattr(backoff, "delay", None)):
            raise ValueError(f"backoff must have a delay(attempt) method, got {backoff!r}")
        if resume_after is not None and not (
            isinstance(resume_after, SequenceKey)
            and isinstance(resume_after.sequence, int)
            and isinstance(resume_after.sub_sequence, int)
            and resume_after.sequence >= 0
            and resume_after.sub_sequence >= 0
        ):
            raise ValueError(f"resume_after must be None or a SequenceKey, got {resume_after!r}")
        self._retry_limit = retry_limit
        self._max_in_flight = max_in_flight
        self._timeout: float | None = None if message_timeout is None else float(message_timeout)
        self._backoff: Backoff = NoBackoff() if backoff is None else backoff

        # Linked list of nodes in emit order, stored as parallel lists (see module doc).
        self._slot: dict[SequenceKey, int] = {}
        self._prev: list[int] = []
        self._next: list[int] = []
        self._att: list[int] = []
        self._rec: list[object] = []  # the record (not done) or the node's key (done)
        self._dl: list[float] = []  # deadline of the latest delivery (with a timeout)
        self._free: list[int] = []
        self._head = -1
        self._tail = -1
        # A restored checkpoint: keys up to it are done (re-reads of them are ignored).
        self._latest = _LOW if resume_after is None else resume_after
        self._checkpoint: SequenceKey | None = resume_after

        # Retries: a heap of (due, key) with lazy deletion; _retry holds the live entry per key.
        # Keys grow in emit order, so (due, key) ties break by emit order.
        self._heap: list[tuple[float, SequenceKey]] = []
        self._retry: dict[SequenceKey, tuple[float, SequenceKey]] = {}

        # Message timeout: deliveries in time order, (deadline, key) in two parallel deques.
        self._tq_at: deque[float] = deque()
        self._tq_key: deque[SequenceKey] = deque()

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
            tail = self._tail
            free = self._free
            if free:
                i = free.pop()
                self._prev[i] = tail
                self._next[i] = -1
                self._att[i] = 1
                self._rec[i] = record
            else:
                att = self._att
                i = len(att)
                att.append(1)
                self._prev.append(tail)
                self._next.append(-1)
                self._rec.append(record)
            if tail < 0:
                self._head = i
            else:
                self._next[tail] = i
            self._tail = i
            self._slot[key] = i
            self._emitted += 1
            if self._timeout is not None:
                self._arm(i, key, now)
            return True
        return self._emit_known(key, record, now)

    def _emit_known(self, key: SequenceKey, record: R | None, now: float) -> bool:
        i = self._slot.get(key)
        if i is None or self._att[i] > 0:
            self._ignored_emits += 1
            return False
        # Awaiting a retry: this is the retry.
        att = self._att
        att[i] = 1 - att[i]
        entry = self._retry.pop(key)
        heap = self._heap
        if heap[0] is entry:
            heapq.heappop(heap)
        else:
            self._maybe_compact_heap()
        if record is not None:
            self._rec[i] = record
        self._retried += 1
        if self._timeout is not None:
            self._arm(i, key, now)
        return True

    # ------------------------------------------------------------------- ack

    def ack(self, key: SequenceKey) -> bool:
        """Mark ``key`` done; True if it took effect.

        An ack of a record awaiting its retry is a late ack: the record is done
        and the retry cancelled.  Unknown and duplicate acks (including acks of
        a record already given up) return False and are counted.
        """
        i = self._slot.pop(key, None)
        if i is None:
            self._bad_ack(key)
            return False
        att = self._att
        if att[i] < 0:
            self._cancel_retry(key)
        prev = self._prev
        nxt = self._next
        rec = self._rec
        p = prev[i]
        n = nxt[i]
        if p < 0:
            # X is the head: drop it (and a done run after it); the checkpoint advances.
            rec[i] = None
            free = self._free
            free.append(i)
            if n >= 0 and att[n] == 0:
                key = cast(SequenceKey, rec[n])
                rec[n] = None
                free.append(n)
                n = nxt[n]
            self._checkpoint = key
            self._head = n
            if n >= 0:
                prev[n] = -1
            else:
                self._tail = -1
                if len(att) > _RELEASE_AT:
                    self._release()
        elif att[p] == 0:
            # P is done (so not the head): drop P; X or a done N represents the run.
            pp = prev[p]
            rec[p] = None
            free = self._free
            free.append(p)
            if n >= 0 and att[n] == 0:
                rec[i] = None
                free.append(i)
                nxt[pp] = n
                prev[n] = pp
            else:
                nxt[pp] = i
                prev[i] = pp
                att[i] = 0
                rec[i] = key
        elif n >= 0 and att[n] == 0:
            # P pending, N done: drop X, N represents the run.
            nxt[p] = n
            prev[n] = p
            rec[i] = None
            self._free.append(i)
        else:
            # P pending, N pending or absent: X stays as a one-key run.
            att[i] = 0
            rec[i] = key
        return True

    def ack_many(self, keys: Iterable[SequenceKey]) -> int:
        """Ack every key in ``keys`` (a micro-batch); returns how many took effect.

        Same semantics as calling ``ack`` on each key in turn, written as one
        tight loop.
        """
        slot_pop = self._slot.pop
        att = self._att
        prev = self._prev
        nxt = self._next
        rec = self._rec
        free = self._free
        push = free.append
        head = self._head
        checkpoint = self._checkpoint
        done = 0
        try:
            for key in keys:
                i = slot_pop(key, None)
                if i is None:
                    self._bad_ack(key)
                    continue
                done += 1
                if att[i] < 0:
                    self._cancel_retry(key)
                p = prev[i]
                n = nxt[i]
                if p < 0:
                    rec[i] = None
                    push(i)
                    checkpoint = key
                    if n >= 0 and att[n] == 0:
                        checkpoint = cast(SequenceKey, rec[n])
                        rec[n] = None
                        push(n)
                        n = nxt[n]
                    head = n
                    if n >= 0:
                        prev[n] = -1
                elif att[p] == 0:
                    pp = prev[p]
                    rec[p] = None
                    push(p)
                    if n >= 0 and att[n] == 0:
                        rec[i] = None
                        push(i)
                        nxt[pp] = n
                        prev[n] = pp
                    else:
                        nxt[pp] = i
                        prev[i] = pp
                        att[i] = 0
                        rec[i] = key
                elif n >= 0 and att[n] == 0:
                    nxt[p] = n
                    prev[n] = p
                    rec[i] = None
                    push(i)
                else:
                    att[i] = 0
                    rec[i] = key
        finally:  # keep the list consistent even if a key blows up (e.g. unhashable)
            self._head = head
            self._checkpoint = checkpoint
            if head < 0:
                self._tail = -1
        if head < 0 and len(att) > _RELEASE_AT:
            self._release()
        return done

    def _bad_ack(self, key: SequenceKey) -> None:
        try:
            duplicate = key <= self._latest
        except TypeError:  # not a key at all
            duplicate = False
        if duplicate:
            self._dup_acks += 1
        else:
            self._unknown_acks += 1

    def _cancel_retry(self, key: SequenceKey) -> None:
        del self._retry[key]
        self._late_acks += 1
        self._maybe_compact_heap()

    # ------------------------------------------------------------------ fail

    def fail(self, key: SequenceKey, now: float = 0.0, error: str | None = None) -> FailOutcome[R]:
        """Fail the latest delivery of ``key``: schedule its retry or give it up.

        Returns RETRY with ``retry_at``, GIVEN_UP with the record (now done, to
        be dead-lettered; handed back exactly once), or IGNORED (counted) for an
        unknown or done key or a record already awaiting its retry.
        """
        i = self._slot.get(key)
        if i is None:
            self._ignored_fails += 1
            return FailOutcome(FailAction.IGNORED, key, None, 0, None, error)
        deliveries = self._att[i]
        if deliveries < 0:
            self._ignored_fails += 1
            return FailOutcome(FailAction.IGNORED, key, None, -deliveries, None, error)
        record = cast("R | None", self._rec[i])
        if deliveries > self._retry_limit:
            self._given_up += 1
            self.ack(key)  # done for the checkpoint; the caller dead-letters the record
            return FailOutcome(FailAction.GIVEN_UP, key, record, deliveries, None, error)
        retry_at = now + self._backoff.delay(deliveries)
        self._att[i] = -deliveries
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

    # ---------------------------------------------------------------- retries

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
        i = self._slot[key]
        return RetryItem(key, cast("R | None", self._rec[i]), 1 - self._att[i])

    def next_retry_at(self) -> float | None:
        """When the earliest pending retry becomes due, or None if none is pending."""
        entry = self._retry_top()
        return None if entry is None else entry[0]

    def _maybe_compact_heap(self) -> None:
        heap = self._heap
        if len(heap) > 2 * len(self._retry) + 32:
            heap[:] = self._retry.values()
            heapq.heapify(heap)

    # ---------------------------------------------------------------- timeout

    def _arm(self, i: int, key: SequenceKey, now: float) -> None:
        assert self._timeout is not None
        deadline = now + self._timeout
        dl = self._dl
        if i == len(dl):
            dl.append(deadline)
        else:
            dl[i] = deadline
        self._tq_at.append(deadline)
        self._tq_key.append(key)
        if len(self._tq_at) > 2 * len(self._slot) + 64:
            self._compact_timeouts()

    def _live_delivery(self, deadline: float, key: SequenceKey) -> bool:
        i = self._slot.get(key)
        return i is not None and self._att[i] > 0 and self._dl[i] == deadline

    def _compact_timeouts(self) -> None:
        live = [
            (deadline, key)
            for deadline, key in zip(self._tq_at, self._tq_key, strict=True)
            if self._live_delivery(deadline, key)
        ]
        self._tq_at = deque(deadline for deadline, _ in live)
        self._tq_key = deque(key for _, key in live)

    def expire(self, now: float) -> list[FailOutcome[R]]:
        """Fail every record whose latest delivery is older than ``message_timeout``.

        A delivery at ``t`` expires once ``now > t + message_timeout``.  Each
        expiry is a ``fail`` (RETRY or GIVEN_UP) with a timeout error, counted in
        ``expired``.  A no-op without a timeout.  Deliveries are taken in the
        order they were emitted, so ``now`` passed to ``emitted`` should not go
        backwards (if it does, a record may expire late, never early).
        """
        timeout = self._timeout
        if timeout is None:
            return []
        tq_at = self._tq_at
        tq_key = self._tq_key
        error = f"message timeout: not acked within {timeout:g} s"
        out: list[FailOutcome[R]] = []
        while tq_at and tq_at[0] < now:
            deadline = tq_at.popleft()
            key = tq_key.popleft()
            if self._live_delivery(deadline, key):
                self._expired += 1
                out.append(self.fail(key, now, error))
        return out

    # ------------------------------------------------------------- releasing

    def _release(self) -> None:
        """Drop every slot once the list is empty (after a burst), so memory follows in-flight.

        Until the tracker drains, freed slots are reused for new records, so the
        slot lists stay at the peak node count since the last drain (at most
        twice the peak in-flight count, so bounded by ``2 * max_in_flight``).
        """
        self._prev.clear()
        self._next.clear()
        self._att.clear()
        self._rec.clear()
        self._dl.clear()
        self._free.clear()

    # ------------------------------------------------------------- read side

    @property
    def checkpoint(self) -> SequenceKey | None:
        """The highest key such that it and every key emitted before it are done.

        None until the first one is.  Never decreases.  Resume a shard with
        ``AFTER_SEQUENCE_NUMBER`` of it (and skip sub-sequences up to its own).
        """
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

    @property
    def stats(self) -> TrackerStats:
        """A snapshot of the counters."""
        in_flight = len(self._slot)
        return TrackerStats(
            emitted=self._emitted,
            acked=self._emitted - in_flight - self._given_up,
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
        )

    def pending(self) -> Iterator[SequenceKey]:
        """The keys not yet done, in emit order (a snapshot, for debugging and tests)."""
        return iter(list(self._slot))

    def is_pending(self, key: Hashable) -> bool:
        """True if ``key`` is in flight or awaiting a retry."""
        return key in self._slot

    def __len__(self) -> int:
        """The number of internal list nodes (pending records plus done-run representatives)."""
        return len(self._att) - len(self._free)

    def _nodes(self) -> list[tuple[SequenceKey, bool]]:
        """The list head to tail as (key, done), after checking its links; for tests."""
        key_of = {i: key for key, i in self._slot.items()}
        out: list[tuple[SequenceKey, bool]] = []
        prev = -1
        i = self._head
        while i >= 0:
            if self._prev[i] != prev:
                raise AssertionError(f"slot {i}: prev is {self._prev[i]}, expected {prev}")
            done = self._att[i] == 0
            out.append((cast(SequenceKey, self._rec[i]) if done else key_of[i], done))
            prev = i
            i = self._next[i]
        if self._tail != prev:
            raise AssertionError(f"tail is {self._tail}, expected {prev}")
        if len(out) != len(self):
            raise AssertionError(f"{len(out)} nodes linked, {len(self)} slots in use")
        return out

    def __repr__(self) -> str:
        return (
            f"<InflightRecordTracker in_flight={len(self._slot)} nodes={len(self)}"
            f" checkpoint={self._checkpoint!s} retries={len(self._retry)}>"
        )
