"""Reading one shard by enhanced fan-out: :class:`EfoShardGetter`.

The same contract as :class:`~kinesis_spout.kinesis.getter.KinesisShardGetter`:
``poll(now)`` never blocks and returns a
:class:`~kinesis_spout.records.ShardBatch` of at most ``limit`` records after
``after`` (the key of the last record returned, at start the checkpoint), so a
re-read never duplicates; ``next_poll_at`` says when polling again may find
something. The records come from a
:class:`~kinesis_spout.kinesis.subscription.SubscriptionPump` (a thread reading
``SubscribeToShard`` events into a buffer of a few events); ``poll`` takes them.
A poll that stops inside an event keeps the rest for the next poll.

``close()`` stops the thread; a later ``poll`` starts it again from where it
stopped. Errors that need a human (an unknown stream or consumer, rejected
credentials, an endpoint without enhanced fan-out) are raised by ``poll``;
retriable ones are reported once in ``ShardBatch.error`` (the pump retries them).
"""

from __future__ import annotations

from datetime import datetime

from kinesis_spout.config import InitialPosition
from kinesis_spout.kinesis.efo_api import FanOutApi, SubscriptionEvent
from kinesis_spout.kinesis.getter import NEVER
from kinesis_spout.kinesis.subscription import SubscriptionPump
from kinesis_spout.records import GetterPosition, Record, ShardBatch, ShardInfo
from tracker import Backoff, SequenceKey

#: Seconds between polls of a shard whose buffer is empty (a buffer check, no I/O).
POLL_INTERVAL = 0.05


class EfoShardGetter:
    """A shard read through subscriptions; see the module docstring.

    ``start`` is the shard's checkpoint (resume after it), or None to start at
    ``position``. ``closed_hint``: ListShards says the shard is closed (so an event
    with no records is followed by a GetRecords probe of its end).
    """

    def __init__(
        self,
        fanout: FanOutApi,
        consumer_arn: str,
        shard_id: str,
        *,
        backoff: Backoff,
        start: SequenceKey | None = None,
        position: InitialPosition = InitialPosition.TRIM_HORIZON,
        timestamp: datetime | None = None,
        limit: int = 10_000,
        after_whole: bool | None = None,
        renew_after: float = 280.0,
        capacity: int = 2,
        closed_hint: bool = False,
        poll_interval: float = POLL_INTERVAL,
    ) -> None:
        if position is InitialPosition.AT_TIMESTAMP and timestamp is None and start is None:
            raise ValueError("position AT_TIMESTAMP needs a timestamp")
        self.shard_id = shard_id
        self.limit = limit
        self.poll_interval = poll_interval
        self._after = start
        self._after_whole = (
            start is not None and start.sub_sequence == 0 if after_whole is None else after_whole
        )
        self.pump = SubscriptionPump(
            fanout,
            consumer_arn,
            shard_id,
            GetterPosition(None, start, self._after_whole, position, timestamp),
            backoff=backoff,
            capacity=capacity,
            renew_after=renew_after,
            probe_limit=limit,
            closed_hint=closed_hint,
        )
        self._head: SubscriptionEvent | None = None
        self._head_pos = 0
        self._next_poll_at = -NEVER
        self._ended = False
        self._caught_up = False
        self.at_tip = False
        """The last event taken whole was not behind (MillisBehindLatest 0)."""
        self.millis_behind_latest: int | None = None
        self.calls = 0
        """Events taken (the counterpart of GetRecords calls)."""
        self.expired_iterators = 0

    # --- read-only state ---------------------------------------------------
    @property
    def after(self) -> SequenceKey | None:
        return self._after

    @property
    def ended(self) -> bool:
        """The shard is closed and every record in it was returned."""
        return self._ended

    @property
    def caught_up(self) -> bool:
        """The last event taken had no records and was not behind, and none waits."""
        return self._caught_up and not self.buffered

    @property
    def errors(self) -> int:
        return self.pump.errors

    @property
    def buffered(self) -> bool:
        """Events (or the rest of one) wait to be taken."""
        return self._head is not None or len(self.pump) > 0

    @property
    def next_poll_at(self) -> float:
        if self._ended:
            return NEVER
        if self.buffered or self.pump.error is not None:
            return -NEVER
        return self._next_poll_at

    def due(self, now: float) -> bool:
        return not self._ended and now >= self.next_poll_at

    def at_tip_after(self, batch: ShardBatch, asked: int) -> bool:
        """A bounded read's rule for the tip: the last event taken was not behind and no
        other event waits (``asked`` does not matter: an event holds what it holds)."""
        return self.at_tip and not self.buffered

    @property
    def position(self) -> GetterPosition:
        """Where the next read starts (no iterator: a subscription starts from a key).
        Before any record, a LATEST start is the moment of its first subscription
        (AT_TIMESTAMP), as the polling getter's is that of its first iterator."""
        start = self.pump.resume
        return GetterPosition(None, self._after, self._after_whole, start.initial, start.timestamp)

    # --- lifecycle -----------------------------------------------------------
    def open_now(self) -> None:
        """Subscribe now rather than at the first poll (LATEST as of this call)."""
        if not self._ended:
            self.pump.start(subscribe_now=True)

    def stop_soon(self) -> None:
        """Tell the subscription thread to stop; do not wait for it."""
        self.pump.stop_soon()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the subscription thread, waiting at most ``timeout`` seconds for it
        (a later poll starts it again)."""
        self.pump.stop(timeout)

    # --- polling ------------------------------------------------------------
    def poll(self, now: float) -> ShardBatch:
        """Up to ``limit`` records after ``after`` from the buffered events; never blocks."""
        if self._ended:
            return ShardBatch([], NEVER, ended=True)
        pump = self.pump
        if pump.error is not None:
            raise pump.error
        pump.start()
        notice = pump.take_notice()
        out: list[Record] = []
        taken = _Taken()
        while len(out) < self.limit and not self._ended:
            event = self._head or pump.take()
            if event is None:
                break
            self._take(event, out, taken)
            if self._head is not None:
                break
        if not taken.events:
            self._next_poll_at = now + self.poll_interval
            return ShardBatch([], self.next_poll_at, error=notice)
        return ShardBatch(
            out,
            self.next_poll_at,
            ended=self._ended,
            called=True,
            millis_behind_latest=self.millis_behind_latest,
            child_shards=taken.children,
            error=notice,
            aggregates=tuple(taken.aggregates),
            skipped=taken.skipped,
            skipped_tail=taken.skipped_tail,
            corrupt_aggregates=taken.corrupt,
        )

    def _take(self, event: SubscriptionEvent, out: list[Record], taken: _Taken) -> None:
        """Move records of ``event`` (from ``_head_pos``) to ``out``, up to the limit."""
        recs = event.records
        first = self._head_pos if self._head is event else 0
        end = min(len(recs), first + self.limit - len(out))
        chunk = recs[first:end] if first or end < len(recs) else recs
        after = self._after
        if chunk and after is not None and chunk[0].key <= after:
            chunk = [r for r in chunk if r.key > after]
        if chunk:
            out.extend(chunk)
            self._after = chunk[-1].key
            taken.skipped_tail = None  # a skipped aggregate before them is covered by them
            if len(recs) > event.raw_count or event.skipped:  # name each aggregate touched
                multi = {r.key.sequence for r in recs if r.key.sub_sequence == 1}
                for r in chunk:
                    if r.key.sequence in multi:
                        taken.aggregates[r.key.sequence] = None
        taken.events += 1
        if first == 0:
            self.calls += 1
        if end < len(recs):  # cut inside the event: the rest waits
            self._head, self._head_pos = event, end
            if chunk:
                self._after_whole = recs[end].sequence_number != recs[end - 1].sequence_number
            return
        self._head, self._head_pos = None, 0
        if chunk:
            self._after_whole = True
        self._event_done(event, taken)

    def _event_done(self, event: SubscriptionEvent, taken: _Taken) -> None:
        """An event was taken whole: its skipped aggregates, lag, end and children."""
        taken.skipped += len(event.skipped)
        taken.corrupt += event.corrupt_aggregates
        if event.skipped:
            tail = event.skipped[-1]
            if self._after is None or tail > self._after:
                self._after, self._after_whole = tail, True
                taken.skipped_tail = tail
            else:
                taken.skipped_tail = None
        behind = event.millis_behind_latest
        self.millis_behind_latest = behind
        self.at_tip = not behind
        self._caught_up = event.raw_count == 0 and not behind
        if event.child_shards:
            taken.children = event.child_shards
        if event.ended:
            self._ended = True
            self.pump.stop()


class _Taken:
    """What one poll took besides records."""

    __slots__ = ("events", "aggregates", "skipped", "skipped_tail", "corrupt", "children")

    def __init__(self) -> None:
        self.events = 0
        self.aggregates: dict[int, None] = {}
        """Sequence numbers of the multi-record KPL aggregates records were taken from."""
        self.skipped = 0
        self.skipped_tail: SequenceKey | None = None
        self.corrupt = 0
        self.children: tuple[ShardInfo, ...] = ()
