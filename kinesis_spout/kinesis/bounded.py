"""Reading a bounded range of one shard: the one loop every reading mode shares.

A :class:`BoundedRead` hands the pages of one shard's getter (GetRecords or an enhanced
fan-out subscription; neither blocks) to its ``take``; :func:`read_until` drives one in
this thread, :func:`read_each` a Spark task's polled shards interleaved. A read ends at
the first of: ``limit`` user records (a KPL aggregate past it is cut; the next read
starts inside it); a page ``take`` took only part of (the caller's own bound); the tip
(``to_tip``, the getter's ``at_tip_after``); a closed shard's end; ``max_calls`` answers,
or ``max_empty_at_tip`` / ``max_empty_behind`` empty ones in a row; a retriable error
with ``stop_on_error`` (an expired iterator is always re-opened); ``max_errors`` errors in
a row, expired iterators included (the last is raised); an error that needs a human
(raised, or with ``fail_soft`` kept in :attr:`~kinesis_spout.records.ReadEnd.failure`);
the deadline; ``stopped``. Where each mode uses it: docs/architecture.md ("The parts,
bottom up"); a read that fails soft: docs/spark-job.md ("How a micro-batch runs").
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

from kinesis_spout.errors import ExpiredIteratorError, KinesisError
from kinesis_spout.kinesis.efo_getter import EfoShardGetter
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.records import ReadEnd, ShardBatch

BoundedGetter = KinesisShardGetter | EfoShardGetter
Take = Callable[[ShardBatch], int]
"""Consumes a page; returns how many of its records it took (fewer ends the read)."""


class BoundedRead:
    """One shard read up to its bounds (see the module docstring): :meth:`fetch` makes
    one call (it may run in a thread of its own), :meth:`accept` hands its page on (in
    the caller's thread), :meth:`finish` closes the getter and says how it ended."""

    __slots__ = (
        "asked",
        "done",
        "empty",
        "end",
        "fail_soft",
        "failures",
        "getter",
        "max_calls",
        "max_empty_at_tip",
        "max_empty_behind",
        "max_errors",
        "per_call",
        "remaining",
        "stop_on_error",
        "take",
        "to_tip",
        "turn",
    )

    def __init__(
        self,
        getter: BoundedGetter,
        limit: int,
        take: Take,
        *,
        per_call: int | None = None,
        to_tip: bool = True,
        stop_on_error: bool = False,
        max_calls: int | None = None,
        max_empty_at_tip: int | None = None,
        max_empty_behind: int | None = None,
        max_errors: int | None = None,
        fail_soft: bool = False,
    ) -> None:
        self.getter = getter
        self.fail_soft = fail_soft
        self.remaining = limit
        self.take = take
        self.per_call = per_call
        self.to_tip = to_tip
        self.stop_on_error = stop_on_error
        self.max_calls = max_calls
        self.max_empty_at_tip = max_empty_at_tip
        self.max_empty_behind = max_empty_behind
        self.max_errors = max_errors
        self.end = ReadEnd()
        self.asked = 0
        self.empty = 0
        self.failures = 0
        self.turn = 0
        self.done = limit <= 0 or getter.ended

    @property
    def next_poll_at(self) -> float:
        return self.getter.next_poll_at

    def fetch(self, now: float) -> ShardBatch:
        """One call of the getter (only this read's getter changes)."""
        remaining = self.remaining
        self.asked = remaining if self.per_call is None else min(self.per_call, remaining)
        self.getter.limit = self.asked
        try:
            return self.getter.poll(now)
        except KinesisError as exc:
            if not self.fail_soft or exc.retriable:
                raise
            self.end.failure = f"{type(exc).__name__}: {exc}"
            self.end.failure_kind = type(exc).__name__
            self.done = True
            return ShardBatch([], math.inf)

    def accept(self, batch: ShardBatch) -> None:
        """A page (or an error) of :meth:`fetch` into ``take`` and the read's state."""
        end, getter = self.end, self.getter
        end.add_call(batch)
        if batch.error is not None and self._error(batch.error):
            return
        if not batch.called:  # an error backed off from, or nothing arrived yet
            return
        self.failures = 0
        if len(batch.records) > self.remaining and isinstance(getter, KinesisShardGetter):
            batch = getter.cut(batch, self.remaining)  # a KPL aggregate past the limit
        took = self.take(batch)
        end.add(batch, took)
        self.remaining -= took
        if took < len(batch.records):
            end.cut = self.done = True
            return
        if getter.ended:  # its last page was taken whole
            self.done = True
            return
        if self.remaining <= 0 or self._too_many(batch):
            self.done = True
        elif self.to_tip and getter.at_tip_after(batch, self.asked):
            end.caught_up = self.done = True

    def _error(self, error: KinesisError) -> bool:
        """Count an error; True when it ends the read."""
        end = self.end
        self.failures += 1
        if self.max_errors is not None and self.failures >= self.max_errors:
            raise error
        if isinstance(error, ExpiredIteratorError):
            return False  # the getter re-opens its iterator at the next poll
        if self.stop_on_error:
            end.stopped_by_error = self.done = True
            return True
        return False

    def _too_many(self, batch: ShardBatch) -> bool:
        """``max_calls`` answers, or too many empty ones in a row."""
        if self.max_calls is not None and self.end.events >= self.max_calls:
            return True
        if batch.records or batch.aggregates or batch.skipped:
            self.empty = 0
            return False
        self.empty += 1
        cap = self.max_empty_behind if batch.millis_behind_latest else self.max_empty_at_tip
        return cap is not None and self.empty >= cap

    def finish(self) -> ReadEnd:
        """Close the getter (a subscription ends); the read's end."""
        getter, end = self.getter, self.end
        subscribed = isinstance(getter, EfoShardGetter) and getter.pump.subscriptions > 0
        getter.close()
        if subscribed and not end.events and not end.errors:
            # Subscribed and nothing arrived within the budget: at the tip. (Not subscribed
            # yet within it: a slow start, which says nothing about the shard.)
            end.caught_up = True
        end.position = getter.position
        end.ended = getter.ended and not end.cut
        end.behind = getter.millis_behind_latest
        end.calls = getter.calls
        return end


def read_until(
    getter: BoundedGetter,
    limit: int,
    seconds: float | None,
    take: Take,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    stopped: Callable[[], bool] | None = None,
    **bounds: Any,
) -> ReadEnd:
    """Read ``getter``'s shard in this thread until ``limit`` user records were taken,
    ``seconds`` passed (None: no deadline), ``stopped()`` (asked before each call) or
    another bound of :class:`BoundedRead` (``bounds`` are its keywords); ``take``
    consumes each page. The getter is closed at the end."""
    read = BoundedRead(getter, limit, take, **bounds)
    return drive(read, seconds, clock=clock, sleep=sleep, stopped=stopped)


def drive(
    read: BoundedRead,
    seconds: float | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    stopped: Callable[[], bool] | None = None,
) -> ReadEnd:
    """Drive one read to its bounds in this thread, within ``seconds`` (None: no
    deadline) and until ``stopped()`` (None: never); sleeps only until the getter is due."""
    deadline = math.inf if seconds is None else clock() + seconds
    try:
        while not read.done:
            now = clock()
            wake = read.next_poll_at
            if now < wake:
                if wake > deadline:
                    break
                sleep(wake - now)
                now = clock()
            if stopped is not None and stopped():
                break
            read.accept(read.fetch(now))
    finally:
        end = read.finish()
    return end


def read_each(
    reads: list[BoundedRead], deadline: float, threads: int
) -> Iterator[tuple[int, ReadEnd]]:
    """Drive several reads (of different shards) interleaved until ``deadline``, and
    yield each one's index and end (:meth:`BoundedRead.finish`) as soon as it is done,
    in the order they end; those the deadline stopped come last, in the order of ``reads``.

    Up to ``threads`` calls in flight (1: one at a time), at most one per shard,
    the shards due first first: a throttled shard's backoff is spent on the others,
    and an idle shard costs one call. A call only touches its shard's getter; its
    page is accepted here, in this thread, so each ``take`` sees its shard's pages in
    order and one at a time. The pool is refilled before a read is yielded, so the
    other shards' calls go on while the caller handles it (a Spark task hands its
    records on while it reads its next shard). Past the deadline only a shard due and
    not called yet gets its one call; the calls in flight are waited for."""
    for i, r in enumerate(reads):
        if r.done:
            yield i, r.finish()
    index = {r: i for i, r in enumerate(reads)}  # a read is hashed by its identity
    waiting = [r for r in reads if not r.done]  # not done, no call in flight
    if waiting:
        for r in _interleave(waiting, deadline, max(1, min(threads, len(waiting)))):
            yield index[r], r.finish()
    for r in sorted(waiting, key=index.__getitem__):  # stopped by the deadline
        yield index[r], r.finish()


def _callable(waiting: list[BoundedRead], now: float, deadline: float) -> list[BoundedRead]:
    """The reads that may be called (once due): all before the deadline; past it, those
    due and never called yet (each shard of a task gets its call: a plan is a promise to
    poll its shard, and a read its deadline left out would leave it out of the next
    micro-batch's rhythm too)."""
    if now < deadline:
        return list(waiting)
    return [r for r in waiting if not r.turn and r.next_poll_at <= now]


def _interleave(waiting: list[BoundedRead], deadline: float, threads: int) -> Iterator[BoundedRead]:
    """:func:`read_each`'s loop over the reads not done yet: yields each as it is done
    (and takes it out of ``waiting``); those left in ``waiting`` the deadline stopped."""
    flying: dict[Future[ShardBatch], BoundedRead] = {}
    finished: list[BoundedRead] = []
    turn = 0
    with ThreadPoolExecutor(threads, thread_name_prefix="kinesis-spout-poll") as pool:
        while flying or waiting or finished:
            now = time.monotonic()
            waiting.sort(key=lambda r: (r.next_poll_at, r.turn))
            due = _callable(waiting, now, deadline)
            while due and len(flying) < threads and due[0].next_poll_at <= now:
                r = due.pop(0)
                waiting.remove(r)
                turn += 1
                r.turn = turn
                flying[pool.submit(r.fetch, now)] = r
            while finished:  # the pool is busy again while the caller takes these
                yield finished.pop(0)
                now = time.monotonic()
            due = _callable(waiting, now, deadline)
            if not (flying or due):
                break
            wake = due[0].next_poll_at if due else None
            if not flying:
                if wake is None or wake > max(deadline, now):
                    break
                time.sleep(max(wake - now, 0.0))
                continue
            # A free thread waits for the next shard due, a full pool for a call to end.
            room = wake is not None and len(flying) < threads
            timeout = max(min(wake, deadline) - now, 0.0) if wake is not None and room else None
            done, _ = wait_futures(list(flying), timeout, FIRST_COMPLETED)
            for f in done:
                r = flying.pop(f)
                r.accept(f.result())
                (finished if r.done else waiting).append(r)
