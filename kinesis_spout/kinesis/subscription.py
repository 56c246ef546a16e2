"""One shard's enhanced fan-out subscriptions, read by a thread into a small buffer.

:class:`SubscriptionPump` keeps a ``SubscribeToShard`` event stream open for one shard
and puts its events into a buffer of at most ``capacity`` events, which its owner
(:class:`~kinesis_spout.kinesis.efo_getter.EfoShardGetter`) takes without blocking; a
full buffer pauses the subscription instead of growing memory. ``start()`` runs the
thread until the end of a closed shard (``ended``), an error that needs a human
(``error``, for the owner to raise) or ``stop()``, after which ``start()`` resumes.
Every subscription starts at :attr:`SubscriptionPump.resume` (:func:`past`,
:func:`starting_position`). Resume positions, renewal, the shard-end probe and the
retried errors: docs/efo.md ("How a shard is read").
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from kinesis_spout.config import InitialPosition
from kinesis_spout.errors import (
    EndpointUnreachableError,
    KinesisError,
    TransientKinesisError,
)
from kinesis_spout.kinesis.efo_api import (
    FanOutApi,
    StartingPosition,
    Subscription,
    SubscriptionEvent,
)
from kinesis_spout.kinesis.getter import latest_start
from kinesis_spout.records import GetterPosition
from tracker import Backoff, SequenceKey

log = logging.getLogger(__name__)

#: Tries of a shard's first subscription that fail with 5xx or no connection before
#: the endpoint is taken not to support enhanced fan-out.
FIRST_TRIES = 6


def starting_position(position: GetterPosition) -> StartingPosition:
    """The ``SubscribeToShard`` starting position of ``position`` (its iterator, always
    None here, is not used): ``AFTER_SEQUENCE_NUMBER`` of a whole record,
    ``AT_SEQUENCE_NUMBER`` of a record inside whose KPL aggregate it stands (the getter
    drops the sub-records done by key), else its initial position."""
    after = position.after
    if after is not None:
        kind = "AFTER_SEQUENCE_NUMBER" if position.after_whole else "AT_SEQUENCE_NUMBER"
        return StartingPosition(kind, str(after.sequence))
    if position.initial is InitialPosition.AT_TIMESTAMP:
        return StartingPosition("AT_TIMESTAMP", timestamp=position.timestamp)
    return StartingPosition(position.initial.value)


def past(position: GetterPosition, event: SubscriptionEvent) -> GetterPosition:
    """Where the next subscription starts once ``event`` was received after ``position``:
    after the event's last Kinesis record, or after its ``ContinuationSequenceNumber``
    when that lies beyond an anchor (that record, else the sequence number ``position``
    stands at or after) and so skips an empty stretch; an unanchored continuation (an
    empty start's, LocalStack says "0") is ignored. ``position`` itself when nothing
    moved. A whole record's key has sub-sequence 0: a subscription starts by sequence
    number."""
    seq = int(event.last_sequence) if event.last_sequence is not None else None
    held = position.after
    anchor = seq if seq is not None else (held.sequence if held is not None else None)
    cont = event.continuation
    if cont is not None and anchor is not None and int(cont) > anchor:
        seq = int(cont)  # an anchored continuation beyond the records: skip the gap
    if seq is None or (position.after_whole and held is not None and held.sequence == seq):
        return position
    return replace(position, after=SequenceKey(seq, 0), after_whole=True)


class _Outcome(enum.Enum):
    RENEW = "renew"
    PROBE = "probe"
    ENDED = "ended"
    STOPPED = "stopped"


class SubscriptionPump:
    """The subscriptions of one shard and their event buffer; see the module docstring."""

    def __init__(
        self,
        fanout: FanOutApi,
        consumer_arn: str,
        shard_id: str,
        resume: GetterPosition,
        *,
        backoff: Backoff,
        capacity: int = 2,
        renew_after: float = 280.0,
        probe_limit: int = 10_000,
        closed_hint: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fanout = fanout
        self.consumer_arn = consumer_arn
        self.shard_id = shard_id
        self.capacity = max(1, capacity)
        self.renew_after = renew_after
        self.probe_limit = probe_limit
        self.closed_hint = closed_hint
        self._backoff = backoff
        self._clock = clock
        self._cond = threading.Condition()
        self._buffer: deque[SubscriptionEvent] = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sub: Subscription | None = None
        self._resume = resume
        self._failures = 0
        self._ever_subscribed = False
        self.ended = False
        """The last event of the closed shard is in the buffer (or was taken)."""
        self.error: KinesisError | None = None
        """An error that needs a human: the owner raises it."""
        self._notice: KinesisError | None = None
        self.subscriptions = self.events = self.received = self.probes = self.errors = 0

    # --- the owner's side ----------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def resume(self) -> GetterPosition:
        """Where the next subscription starts (no iterator); see the module docstring."""
        with self._cond:
            return self._resume

    def start(self, *, subscribe_now: bool = False) -> None:
        """Start the thread (idempotent). ``subscribe_now`` makes the first
        subscription in this thread (LATEST means "from this call on")."""
        if self.running or self.ended or self.error is not None:
            return
        self._stop.clear()
        first: Subscription | None = None
        if subscribe_now:
            try:
                first = self._subscribe()
            except KinesisError as exc:
                if not self._failed(exc):
                    return
        thread = threading.Thread(
            target=self._run, args=(first,), name=f"kinesis-efo-{self.shard_id}", daemon=True
        )
        self._thread = thread
        thread.start()

    def take(self) -> SubscriptionEvent | None:
        """The oldest buffered event, or None (never blocks)."""
        with self._cond:
            if not self._buffer:
                return None
            event = self._buffer.popleft()
            self._cond.notify_all()
            return event

    def __len__(self) -> int:
        return len(self._buffer)

    def take_notice(self) -> KinesisError | None:
        """The last retriable error since the previous call (for logs and metrics)."""
        notice, self._notice = self._notice, None
        return notice

    def stop_soon(self) -> None:
        """Tell the thread to stop and close its subscription; do not wait."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
            sub = self._sub
        if sub is not None:
            sub.close()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread (waiting at most ``timeout`` seconds) and close its
        subscription; buffered events stay."""
        self.stop_soon()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                # Kept: ``start`` does not run a second thread beside it (this one ends
                # when its call returns, as it sees the stop).
                log.warning(
                    "%s: subscription thread still running after %.0fs", self.shard_id, timeout
                )
                return
        self._thread = None

    # --- the thread ----------------------------------------------------------------
    def _run(self, first: Subscription | None) -> None:
        sub = first
        while not self._stop.is_set():
            try:
                if sub is None:
                    sub = self._subscribe()
                outcome = self._drain(sub)
                sub = None
                if outcome is _Outcome.PROBE:
                    outcome = self._probe()
                if outcome in (_Outcome.ENDED, _Outcome.STOPPED):
                    return
            except KinesisError as exc:
                sub = None
                if self._stop.is_set() or not self._failed(exc):
                    return
                self._stop.wait(self._backoff.delay(self._failures))
            except Exception as exc:  # a bug or an unexpected library error: surface it
                log.exception("%s: subscription thread failed", self.shard_id)
                self.error = KinesisError(f"subscription of {self.shard_id} failed: {exc!r}")
                return

    def _subscribe(self) -> Subscription:
        with self._cond:
            resume = self._resume
        start = starting_position(resume)
        sub = self.fanout.subscribe(self.consumer_arn, self.shard_id, start)
        self.subscriptions += 1
        if not self._ever_subscribed:
            self._ever_subscribed = True
            if resume.after is None and resume.initial is InitialPosition.LATEST:
                # Renewals before any record start where this one did, not at a later LATEST.
                opened = latest_start(sub.server_time)
                with self._cond:
                    self._resume = replace(
                        resume, initial=InitialPosition.AT_TIMESTAMP, timestamp=opened
                    )
        with self._cond:
            self._sub = sub
        if self._stop.is_set():
            sub.close()
        log.debug("%s: subscribed at %s", self.shard_id, start)
        return sub

    def _drain(self, sub: Subscription) -> _Outcome:
        """Read ``sub`` until it ends, must be renewed, or the pump stops."""
        started = self._clock()
        idle = True  # no event yet, or the last one had no records
        try:
            for event in sub.events():
                if not self._push(event):
                    return _Outcome.STOPPED
                self._failures = 0
                if event.ended:
                    return _Outcome.ENDED
                idle = event.raw_count == 0
                if idle and self.closed_hint:
                    return _Outcome.PROBE
                if self._clock() - started >= self.renew_after:
                    log.debug("%s: renewing the subscription", self.shard_id)
                    return _Outcome.RENEW
        except KinesisError:
            if self._stop.is_set():
                return _Outcome.STOPPED
            raise
        finally:
            sub.close()
            with self._cond:
                if self._sub is sub:
                    self._sub = None
        if self._stop.is_set():
            return _Outcome.STOPPED
        return _Outcome.PROBE if idle else _Outcome.RENEW

    def _probe(self) -> _Outcome:
        """One GetRecords page from the resume point: is the shard closed?"""
        with self._cond:
            start = starting_position(self._resume)
        self.probes += 1
        event = self.fanout.probe(self.shard_id, start, self.probe_limit)
        if (event.raw_count or event.ended) and not self._push(event):
            return _Outcome.STOPPED
        if event.ended:
            log.info("%s: the shard is closed (found by a GetRecords probe)", self.shard_id)
        return _Outcome.ENDED if event.ended else _Outcome.RENEW

    def _push(self, event: SubscriptionEvent) -> bool:
        """Buffer ``event`` once there is room (the subscription pauses meanwhile);
        False if the pump stopped first."""
        with self._cond:
            while len(self._buffer) >= self.capacity and not self._stop.is_set():
                self._cond.wait()
            if self._stop.is_set():
                return False
            self._buffer.append(event)
            self._resume = past(self._resume, event)
            self.events += 1
            self.received += len(event.records)
            if event.ended:
                self.ended = True
            self._cond.notify_all()
        return True

    def _failed(self, exc: KinesisError) -> bool:
        """Count an error; True if it is retried (after a backoff), False if fatal."""
        self.errors += 1
        self._failures += 1
        first = not self._ever_subscribed
        down = isinstance(exc, TransientKinesisError | EndpointUnreachableError)
        if exc.retriable and not (first and down and self._failures >= FIRST_TRIES):
            self._notice = exc
            log.info("%s: %s; subscribing again after a backoff", self.shard_id, exc)
            return True
        if exc.retriable:
            exc = KinesisError(
                f"{exc} (SubscribeToShard failed {self._failures} times and never succeeded: "
                f"does {self.fanout.api.client.meta.endpoint_url} support enhanced fan-out? "
                'moto does not; use consumer = "polling" there)'
            )
        self.error = exc
        log.error("%s: subscription failed: %s", self.shard_id, exc)
        return False
