"""One shard's reading state: tracker, replay window, dead-letter write-ahead.

A :class:`ShardPartition` is what a reader keeps per shard between fetches, whether it
reads the shard itself or Spark tasks do; it does no I/O of its own (the dead-letter sink
is passed in). Its ``state`` is a :class:`~kinesis_spout.records.ShardState`.

*Window* (:class:`ReplayWindow`): the keys handed out for the first time since the last
saved checkpoint, what a crash now would replay. A full window (``max_in_flight``) is not
fetched, except that :meth:`ShardPartition.room` lets the next record in while the
checkpoint waits on the first user record of a multi-record KPL aggregate, which cannot
be saved. *Dead-letter write-ahead*: a given-up record joins ``dead_pending`` before its
write, and its tracker is told only after the write returned, so an interrupted write
leaves the checkpoint below it. Details: docs/guarantees.md ("The replay bound") and
docs/reader.md ("Checkpoints and KPL aggregates").
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import deque
from collections.abc import Iterable

from kinesis_spout.core.cursor import ShardCursor
from kinesis_spout.deadletter import DeadLetter, DeadLetterSink
from kinesis_spout.kinesis.buffered import BufferedShardGetter
from kinesis_spout.records import Checkpoint, Record, ShardState
from tracker import InflightRecordTracker, SequenceKey


class _Run:
    """Records read one after another: ``count`` of them up to ``last``; ``keys`` holds
    their keys (from index ``head`` on) when the reader knew them."""

    __slots__ = ("count", "head", "keys", "last")

    def __init__(self, last: SequenceKey, count: int, keys: list[SequenceKey] | None) -> None:
        self.last = last
        self.count = count
        self.keys = keys
        self.head = 0


class ReplayWindow:
    """The records a shard handed out for the first time since its saved checkpoint.

    One window for both ways of reading: the local loop adds the keys it hands out
    (:meth:`add_keys`, exact), the Spark driver adds what a read task read as one run,
    its last key and its count (:meth:`add_run`: it never sees the keys in between).
    A save forgets what it covers (:meth:`trim`); a run the save cuts stays whole
    unless its keys are known, so the window never counts less than a crash would
    replay.
    """

    __slots__ = ("_runs", "size")

    def __init__(self) -> None:
        self._runs: deque[_Run] = deque()
        self.size = 0
        """Records in the window."""

    def add_keys(self, keys: list[SequenceKey]) -> None:
        """Keys handed out, in key order (they join the last run when it has keys)."""
        if not keys:
            return
        runs = self._runs
        tail = runs[-1] if runs else None
        if tail is not None and tail.keys is not None:
            tail.keys.extend(keys)
            tail.last = keys[-1]
            tail.count += len(keys)
        else:
            runs.append(_Run(keys[-1], len(keys), list(keys)))
        self.size += len(keys)

    def add_run(self, last: SequenceKey, count: int) -> None:
        """``count`` records read up to ``last`` (keys unknown)."""
        if count > 0:
            self._runs.append(_Run(last, count, None))
            self.size += count

    @property
    def last(self) -> SequenceKey | None:
        """The last key handed out (None: the window is empty)."""
        return self._runs[-1].last if self.size else None

    def trim(self, saved: SequenceKey) -> None:
        """Forget what the newly saved checkpoint ``saved`` covers."""
        runs = self._runs
        while runs and runs[0].last <= saved:
            self.size -= runs.popleft().count
        run = runs[0] if runs else None
        if run is None or run.keys is None:
            return
        keys = run.keys
        head = bisect.bisect_right(keys, saved, run.head)
        run.count -= head - run.head
        self.size -= head - run.head
        if head > 4096 and head * 2 > len(keys):
            del keys[:head]
            head = 0
        run.head = head

    def covered(self, checkpoint: SequenceKey) -> int:
        """Records of the window at or below ``checkpoint`` (a cut run without keys: none
        of it)."""
        n = 0
        for run in self._runs:
            if run.last <= checkpoint:
                n += run.count
                continue
            if run.keys is not None:
                n += bisect.bisect_right(run.keys, checkpoint, run.head) - run.head
            break
        return n


class ShardPartition:
    """Per-shard reading state; see the module docstring."""

    __slots__ = (
        "stream",
        "shard_id",
        "state",
        "tracker",
        "reader",
        "cursor",
        "saved",
        "fenced",
        "dead_pending",
        "aggregates",
        "stored",
        "window",
        "skip_tail",
        "releasing",
    )

    def __init__(self, stream: str, shard_id: str, stored: Checkpoint | None) -> None:
        self.stream = stream
        self.shard_id = shard_id
        self.state = ShardState.WAITING
        self.tracker: InflightRecordTracker[Record] | None = None
        self.reader: BufferedShardGetter | None = None
        """The getter the reader polls itself (None once ended, or read elsewhere)."""
        self.cursor: ShardCursor | None = None
        """Where a read elsewhere goes on (a reader whose shards Spark tasks read)."""
        self.saved: SequenceKey | None = None
        """The last checkpoint saved (or loaded) for this shard."""
        self.fenced = False
        """Another owner is ahead: this reader stops emitting the shard."""
        self.dead_pending: list[DeadLetter] = []
        # A skipped empty KPL aggregate after every record read: done once those are out.
        self.skip_tail: SequenceKey | None = None
        # Being given up (drain_shards): no new records, its retries still go out.
        self.releasing = False
        self.aggregates: dict[int, None] = {}
        """Sequence numbers of multi-record KPL aggregates not yet passed by a save."""
        self.stored = stored
        self.window = ReplayWindow()
        """What a crash now would replay (see the module docstring)."""

    # --- the replay window ------------------------------------------------------------
    def room(self, max_in_flight: int) -> int:
        """Records the shard may hand out for the first time now: the window's free
        part, or 1 while the checkpoint waits on the next record of an aggregate (see
        the module docstring)."""
        window = self.window
        room = max_in_flight - window.size
        if room <= 0 and self.held_in_aggregate(window.last):
            return 1
        return room

    def held_in_aggregate(self, last_read: SequenceKey | None) -> bool:
        """Every record read (up to ``last_read``) is done, and the checkpoint is the
        first user record of a multi-record KPL aggregate: it cannot be saved until
        the aggregate's next record is done too."""
        tracker = self.tracker
        cp = tracker.checkpoint if tracker is not None else None
        return (
            cp is not None
            and cp == last_read
            and cp.sub_sequence == 0
            and cp.sequence in self.aggregates
            and (self.saved is None or cp > self.saved)
        )

    def savable(self) -> int:
        """Records of the window that the tracker's checkpoint already covers."""
        tracker = self.tracker
        cp = tracker.checkpoint if tracker is not None else None
        if cp is None or (self.saved is not None and cp <= self.saved):
            return 0
        return self.window.covered(cp)

    @property
    def emitting(self) -> bool:
        return not self.fenced and not self.dead_pending

    @property
    def key(self) -> tuple[str, str]:
        """``(stream, shard id)``."""
        return (self.stream, self.shard_id)

    @property
    def buffered(self) -> int:
        """Records read and not handed out yet (a shard read elsewhere buffers none)."""
        return self.reader.buffered if self.reader is not None else 0

    @property
    def caught_up(self) -> bool:
        """The shard's last read reached its tip."""
        if self.reader is not None:
            return self.reader.getter.caught_up
        return self.cursor is not None and self.cursor.caught_up

    @property
    def millis_behind_latest(self) -> int | None:
        if self.reader is not None:
            return self.reader.getter.millis_behind_latest
        return self.cursor.behind if self.cursor is not None else None

    @property
    def reading(self) -> bool:
        """Started: read here (a getter) or elsewhere (a cursor)."""
        return self.reader is not None or self.cursor is not None

    @property
    def drained(self) -> bool:
        """Every record handed out and done, nothing buffered, no dead letter pending."""
        tracker = self.tracker
        if tracker is None or not self.reading or self.fenced or self.dead_pending:
            return False
        return not self.buffered and not tracker.in_flight

    @property
    def idle(self) -> bool:
        """Nothing in flight, buffered or pending, and caught up (or not reading)."""
        if self.state in (ShardState.ENDED, ShardState.WAITING) or self.fenced:
            return True
        tracker = self.tracker
        if tracker is None or not self.reading:
            return True
        if self.state is ShardState.DRAINING or tracker.in_flight or self.dead_pending:
            return False
        return not self.buffered and self.caught_up

    # --- handing records out ----------------------------------------------------------
    def emit(self, records: Iterable[Record], now: float) -> None:
        """Track first deliveries (they join the window)."""
        assert self.tracker is not None
        emitted = self.tracker.emitted
        self.window.add_keys([r.key for r in records if emitted(r.key, r, now)])

    def take_retries(self, now: float, limit: int) -> list[Record]:
        """Up to ``limit`` due retries, tracked as delivered (their ``attempt`` set)."""
        tracker = self.tracker
        out: list[Record] = []
        if tracker is None:
            return out
        due = tracker.next_retry_at()
        if due is None or due > now:
            return out
        while len(out) < limit:
            item = tracker.next_retry(now)
            if item is None:
                break
            rec = item.record
            assert rec is not None
            rec = dataclasses.replace(rec, attempt=item.attempt)
            tracker.emitted(item.key, rec, now)
            out.append(rec)
        return out

    def pass_skipped(self, now: float) -> None:
        """Count a trailing skipped empty aggregate done (every record before it is out)."""
        key = self.skip_tail
        self.skip_tail = None
        tracker = self.tracker
        if key is not None and tracker is not None and tracker.emitted(key, None, now):
            tracker.ack(key)
            self.window.add_keys([key])

    # --- dead letters -------------------------------------------------------------------
    def queue_dead_letter(self, letter: DeadLetter) -> bool:
        """Write-ahead a given-up record; True if it is the only one pending (write now)."""
        self.dead_pending.append(letter)
        return len(self.dead_pending) == 1

    def flush_dead_letters(self, sink: DeadLetterSink) -> tuple[int, Exception | None]:
        """Write the pending dead letters in order: ``(written, the error that stopped it)``.

        One ``write_many`` for all of them (one object or one fsync); each record
        is passed to its tracker (done) only after that write returned.
        """
        if not self.dead_pending:
            return 0, None
        letters = list(self.dead_pending)
        try:
            sink.write_many(letters)
        except Exception as exc:
            return 0, exc
        del self.dead_pending[: len(letters)]
        if self.tracker is not None:
            for letter in letters:
                self.tracker.dead_lettered(letter.record.key)
        return len(letters), None
