"""Handing records out: due retries first, then new records round-robin.

:class:`RoundRobin` is the spout's fill loop over a
:class:`~kinesis_spout.core.shardset.ShardSet`'s rotation. Each pass offers
every shard an equal share of what is left of the batch; a shard whose replay
window is full (``max_in_flight`` records handed out after its saved
checkpoint) is asked to make room (an early save) and skipped if it cannot; a
shard being released or fenced, or with a dead letter pending, gets nothing
new. It makes at most one GetRecords call per shard per batch, and never
blocks. An error raised by a fetch is kept (``pending_error``) after the
records already taken are handed out.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.core.shardset import ShardSet
from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.records import Record
from tracker import FailOutcome

#: Longest wait while records are in flight with a message timeout (expiry checks).
EXPIRY_CHECK = 1.0


class RoundRobin:
    """The fill loop of one reader; see the module docstring.

    ``make_room(partition, now)`` saves early if that frees the window and
    returns the room left.
    """

    def __init__(
        self,
        shard_set: ShardSet,
        metrics: MetricsCollector,
        *,
        max_in_flight: int,
        message_timeout: float,
        make_room: Callable[[ShardPartition, float], int],
        early_save_at: int,
    ) -> None:
        self._set = shard_set
        self._metrics = metrics
        self._max_in_flight = max_in_flight
        self._message_timeout = message_timeout
        self._make_room = make_room
        self._early_save_at = early_save_at
        self.read = 0
        self.retried = 0
        self.pending_error: Exception | None = None
        self.held: Collection[str] = ()
        """Shards whose deliveries a running Spark task holds (executor reads): they do
        not expire here; the task's own deadline covers them."""

    def take(self, max_records: int, now: float) -> list[Record]:
        """Up to ``max_records`` records: due retries first, then new ones round-robin."""
        out: list[Record] = []
        for _, retries in self.due_retries(max_records, now):
            out.extend(retries)
        if len(out) < max_records and self._set.rotation:
            self._fill(out, max_records - len(out), now)
        return out

    def due_retries(
        self, max_records: int, now: float, skip: Collection[str] = ()
    ) -> list[tuple[ShardPartition, list[Record]]]:
        """The due retries of the shards in rotation order, up to ``max_records`` in all,
        taken from their trackers (and counted), except those of the shards in ``skip``.
        Both the spout's loop and the Spark driver's planner hand these out first."""
        out: list[tuple[ShardPartition, list[Record]]] = []
        left = max_records
        for sh in self._set.rotation:
            if sh.tracker is None or not sh.emitting or left <= 0 or sh.shard_id in skip:
                continue
            retries = sh.take_retries(now, left)
            if retries:
                out.append((sh, retries))
                left -= len(retries)
                self.retried += len(retries)
                self._metrics.increment("retries", len(retries), shard=sh.shard_id)
        return out

    def _fill(self, out: list[Record], remaining: int, now: float) -> None:
        """Round-robin: each pass offers every shard an equal share of what is left."""
        rotation = self._set.rotation
        n = len(rotation)
        start = self._set.cursor % n
        limit = self._max_in_flight
        metrics = self._metrics
        polled: set[str] = set()
        last = -1
        hungry = n
        while remaining > 0:
            share = -(-remaining // hungry)
            hungry = 0
            for j in range(n):
                idx = (start + j) % n
                sh = rotation[idx]
                tracker = sh.tracker
                reader = sh.reader
                if tracker is None or reader is None or not sh.emitting or sh.releasing:
                    continue
                room = sh.room(limit)
                if room <= 0:
                    room = self._make_room(sh, now)
                    if room <= 0:
                        continue
                if reader.buffered == 0:
                    if sh.shard_id in polled:
                        continue
                    polled.add(sh.shard_id)
                try:
                    recs = reader.take(min(share, room, remaining), now)
                except Exception as exc:
                    # Hand out what was taken (already tracked); raise on the next call.
                    self.pending_error = exc
                    remaining = 0
                    break
                for page in reader.polled():  # lineage, lag, odd aggregates, end
                    self._set.on_batch(sh, page)
                sh.emit(recs, now)
                if sh.skip_tail is not None and not reader.buffered:
                    sh.pass_skipped(now)
                if not recs:
                    continue
                out.extend(recs)
                k = len(recs)
                remaining -= k
                self.read += k
                metrics.increment("records_read", k, shard=sh.shard_id)
                last = idx
                if k == share:
                    hungry += 1
                if remaining <= 0:
                    break
            if hungry == 0:
                break
        if last >= 0:
            self._set.cursor = last + 1

    def expire(
        self, now: float, on_fail: Callable[[ShardPartition, FailOutcome[Record]], None]
    ) -> None:
        """Fail the deliveries older than the message timeout (``on_fail`` each outcome),
        except those of the shards in :attr:`held`."""
        held = self.held
        for sh in self._set.rotation:
            tracker = sh.tracker
            if tracker is not None and tracker.in_flight and sh.shard_id not in held:
                for outcome in tracker.expire(now):
                    on_fail(sh, outcome)

    def wake_at(self, now: float, t: float) -> float:
        """The earliest of ``t`` and the moments a shard may have something to hand out."""
        for sh in self._set.rotation:
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
