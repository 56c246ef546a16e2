"""Handing records out: due retries first, then new records round-robin.

:class:`RoundRobin` is the spout's fill loop over the rotations of its streams'
:class:`~kinesis_spout.core.shardset.ShardSet` s. Each stream is offered an equal share
of the batch first (a different stream first at each call), then what is left goes to
the streams that filled their share: a stream of 1 shard is read as often as one of 64.
Within a stream each pass offers every shard an equal share of what is left; a shard
whose replay window is full (``max_in_flight`` records handed out after its saved
checkpoint) is asked to make room (an early save) and skipped if it cannot; a shard
being released or fenced, or with a dead letter pending, gets nothing new. It makes at
most one GetRecords call per shard per batch, and never blocks. An error raised by a
fetch is kept (``pending_error``, with its stream) after the records already taken are
handed out.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.core.shardset import ShardSet
from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.records import ReadEnd, Record, ShardKey
from tracker import FailOutcome

#: Longest wait while records are in flight with a message timeout (expiry checks).
EXPIRY_CHECK = 1.0


class RoundRobin:
    """The fill loop of one reader; see the module docstring.

    ``sets`` gives the reader's shard sets, one per stream still read, in the config's
    order. ``make_room(partition, now)`` saves early if that frees the window and
    returns the room left.
    """

    def __init__(
        self,
        sets: Callable[[], Sequence[ShardSet]],
        metrics: MetricsCollector,
        *,
        max_in_flight: int,
        message_timeout: float,
        make_room: Callable[[ShardPartition, float], int],
        early_save_at: int,
    ) -> None:
        self._sets = sets
        self._metrics = metrics
        self._max_in_flight = max_in_flight
        self._message_timeout = message_timeout
        self._make_room = make_room
        self._early_save_at = early_save_at
        self._turn = 0
        self.read = 0
        self.retried = 0
        self.pending_error: tuple[str, Exception] | None = None
        """An error a fetch raised, and the stream it read."""

    def partitions(self) -> list[ShardPartition]:
        """Every shard in rotation, stream by stream."""
        return [sh for st in self._sets() for sh in st.rotation]

    def _emitting(self) -> list[ShardPartition]:
        """The shards in rotation of the streams not paused."""
        return [sh for st in self._sets() if st.active for sh in st.rotation]

    def take(self, max_records: int, now: float) -> list[Record]:
        """Up to ``max_records`` records: due retries first, then new ones round-robin."""
        out: list[Record] = []
        for _, retries in self.due_retries(max_records, now):
            out.extend(retries)
        sets = [st for st in self._sets() if st.rotation and st.active]
        if len(out) >= max_records or not sets:
            return out
        k = self._turn % len(sets)
        self._turn += 1
        order = sets[k:] + sets[:k]
        share = max(1, (max_records - len(out)) // len(order))
        polled: set[ShardKey] = set()
        full: list[ShardSet] = []
        for st in order:
            want = min(share, max_records - len(out))
            if want <= 0 or self.pending_error is not None:
                break
            if self._fill(st, out, want, now, polled) == want:
                full.append(st)
        for st in full:
            if len(out) >= max_records or self.pending_error is not None:
                break
            self._fill(st, out, max_records - len(out), now, polled)
        return out

    def due_retries(
        self, max_records: int, now: float, skip: Collection[ShardKey] = ()
    ) -> list[tuple[ShardPartition, list[Record]]]:
        """The due retries of the shards in rotation order, up to ``max_records`` in all,
        taken from their trackers (and counted), except those of the shards in ``skip``.
        Both the spout's loop and the Spark driver's planner hand these out first."""
        out: list[tuple[ShardPartition, list[Record]]] = []
        left = max_records
        for sh in self._emitting():
            if sh.tracker is None or not sh.emitting or left <= 0 or sh.key in skip:
                continue
            retries = sh.take_retries(now, left)
            if retries:
                out.append((sh, retries))
                left -= len(retries)
                self.retried += len(retries)
                self._metrics.increment(
                    "retries", len(retries), shard=sh.shard_id, stream=sh.stream
                )
        return out

    def _fill(
        self, st: ShardSet, out: list[Record], remaining: int, now: float, polled: set[ShardKey]
    ) -> int:
        """Round-robin over one stream's shards: each pass offers every shard an equal
        share of what is left; the records added to ``out``."""
        rotation = st.rotation
        n = len(rotation)
        start = st.cursor % n
        added = 0
        last = -1
        hungry = n
        while remaining > 0:
            share = -(-remaining // hungry)
            hungry = 0
            for j in range(n):
                idx = (start + j) % n
                recs = self._take(st, rotation[idx], min(share, remaining), now, polled)
                if self.pending_error is not None:
                    remaining = 0
                    break
                if not recs:
                    continue
                out.extend(recs)
                k = len(recs)
                remaining -= k
                added += k
                last = idx
                if k == share:
                    hungry += 1
                if remaining <= 0:
                    break
            if hungry == 0:
                break
        if last >= 0:
            st.cursor = last + 1
        return added

    def _take(
        self, st: ShardSet, sh: ShardPartition, n: int, now: float, polled: set[ShardKey]
    ) -> list[Record]:
        """Up to ``n`` new records of one shard, within its room, tracked and counted (at
        most one call of its getter per batch). An error is kept in ``pending_error``."""
        reader = sh.reader
        if sh.tracker is None or reader is None or not sh.emitting or sh.releasing:
            return []
        room = sh.room(self._max_in_flight)
        if room <= 0:
            room = self._make_room(sh, now)
            if room <= 0:
                return []
        if reader.buffered == 0:
            if sh.key in polled:
                return []
            polled.add(sh.key)
        try:
            recs = reader.take(min(n, room), now)
        except Exception as exc:  # what was taken is handed out; raised on the next call
            self.pending_error = (st.stream, exc)
            return []
        for page in reader.polled():  # lineage, lag, odd aggregates, end
            st.apply_end(sh, ReadEnd.of_page(page))
        sh.emit(recs, now)
        if sh.skip_tail is not None and not reader.buffered:
            sh.pass_skipped(now)
        if recs:
            self.read += len(recs)
            self._metrics.increment("records_read", len(recs), shard=sh.shard_id, stream=sh.stream)
        return recs

    def expire(
        self,
        now: float,
        on_fail: Callable[[ShardPartition, FailOutcome[Record]], None],
        held: Collection[ShardKey] = (),
    ) -> None:
        """Fail the deliveries older than the message timeout (``on_fail`` each outcome),
        except those of the shards ``held`` (a running Spark task holds them: its own
        deadline covers them)."""
        for sh in self.partitions():
            tracker = sh.tracker
            if tracker is not None and tracker.in_flight and sh.key not in held:
                for outcome in tracker.expire(now):
                    on_fail(sh, outcome)

    def wake_at(self, now: float, t: float) -> float:
        """The earliest of ``t`` and the moments a shard may have something to hand out."""
        for sh in self._emitting():
            tracker, reader = sh.tracker, sh.reader
            if tracker is None or reader is None or not sh.emitting:
                continue
            due = tracker.next_retry_at()
            if due is not None and due < t:
                t = due
            if sh.releasing:
                continue
            if sh.room(self._max_in_flight) > 0 or sh.savable() >= self._early_save_at:
                ready = reader.ready_at()
                if ready < t:
                    t = ready
            if tracker.in_flight and self._message_timeout:
                t = min(t, now + EXPIRY_CHECK)
        return t
