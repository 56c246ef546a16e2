"""The shards of one stream that a reader owns, and their lifecycle.

A :class:`ShardSet` keeps a :class:`ShardPartition` per owned shard of its stream, the
lineage registry (:class:`~kinesis_spout.kinesis.shards.ShardMap`) and the round-robin
rotation of the shards being read and draining. It adopts shards (store errors retried
with backoff, never raised from a fetch), starts them once their parents ended
(WAITING -> OPEN -> DRAINING -> ENDED), refreshes the shard list and gives shards up.
What a read of a shard said (lineage, lag, KPL aggregates, end) is applied in one step,
:meth:`ShardSet.apply_end`, whoever read it: the spout's own poll or a Spark task. The
fetch is :mod:`kinesis_spout.kinesis.getter`'s; checkpoint writes are the
:class:`~kinesis_spout.core.committer.Committer`'s.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable

from kinesis_spout.config import SpoutConfig
from kinesis_spout.core.committer import Committer
from kinesis_spout.core.cursor import Pacing, ShardCursor
from kinesis_spout.core.getters import GetterFactory
from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.core.retrypolicy import RetryPolicy
from kinesis_spout.errors import (
    CheckpointError,
    CheckpointStoreUnavailableError,
    ExpiredIteratorError,
    KinesisError,
    ResourceInUseError,
    ThrottledError,
)
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.buffered import BufferedShardGetter, close_getters
from kinesis_spout.kinesis.shards import ShardMap, check_transition
from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.records import Checkpoint, ReadEnd, ShardState
from tracker import Backoff, ExponentialBackoff, InflightRecordTracker

log = logging.getLogger(__name__)

_INF = math.inf
#: Retry a failed ListShards this soon rather than after the full refresh interval.
_REFRESH_RETRY = 5.0


class ShardSet:
    """The owned shards of one stream of a reader; see the module docstring.

    ``config`` is the stream's own (:meth:`~kinesis_spout.config.SpoutConfig.per_stream`).
    ``save(partition, now)`` saves a shard's checkpoint (the reader flushes its
    dead letters first); ``api`` is set when the reader opens.
    """

    def __init__(
        self,
        config: SpoutConfig,
        committer: Committer,
        metrics: MetricsCollector,
        clock: Callable[[], float],
        *,
        save: Callable[[ShardPartition, float], bool],
        throttle_backoff: Backoff,
        retry: RetryPolicy,
    ) -> None:
        self.config = config
        self.stream = config.stream_name
        self._committer = committer
        self._metrics = metrics
        self._clock = clock
        self._save = save
        self._throttle_backoff = throttle_backoff
        self._retry = retry
        self.api: KinesisApi | None = None
        self.getters: GetterFactory | None = None
        """Makes each started shard's getter (polling or subscription); set on open."""
        self.map = ShardMap()
        self.owned: frozenset[str] | None = None
        self.shards: dict[str, ShardPartition] = {}
        self.rotation: list[ShardPartition] = []
        self.cursor = 0
        self.draining: list[ShardPartition] = []
        self.refresh_at = _INF
        self.lineage_at = _INF
        # Shards to adopt whose stored checkpoints could not be read yet (store away).
        self.to_adopt: set[str] = set()
        self.active = True
        """The stream's records are handed out (a coordinator pauses it: False)."""
        self.adopt_at = -_INF
        self._store_failures = 0
        self._store_backoff: Backoff = ExponentialBackoff(0.5, cap=30.0)

    def owns(self, shard_id: str) -> bool:
        return self.owned is None or shard_id in self.owned

    def adopt(self, shard_id: str, stored: Checkpoint | None) -> None:
        """Take ``shard_id`` on: ENDED if its checkpoint says so, else WAITING."""
        sh = ShardPartition(self.stream, shard_id, stored)
        self.shards[shard_id] = sh
        if (stored is not None and stored.shard_end) or self.map.is_ended(shard_id):
            sh.state = ShardState.ENDED
            self.map.mark_ended(shard_id)

    def start_ready(self) -> None:
        """Start every WAITING owned shard whose parents all ended (cascading)."""
        for sh in list(self.shards.values()):
            if sh.state is ShardState.WAITING and self.map.parents_ended(sh.shard_id):
                self.start(sh)

    def start(self, sh: ShardPartition) -> None:
        cfg = self.config
        assert self.getters is not None
        fresh = sh.key in self._committer.fresh_pins
        getter, start, position = self.getters.for_shard(sh.shard_id, sh.stored, fresh, self.map)
        if self.getters.read_here:
            sh.reader = BufferedShardGetter(getter)
        else:  # read elsewhere (Spark tasks): only where the next read goes on
            sh.cursor = ShardCursor(getter.position, pacing_of(cfg))
        sh.tracker = InflightRecordTracker(
            self._retry.limit,
            max_in_flight=cfg.max_in_flight,
            message_timeout=cfg.message_timeout_or_none,
            backoff=self._retry.backoff,
        )
        sh.saved = start
        sh.state = check_transition(sh.shard_id, sh.state, ShardState.OPEN)
        self.rotation.append(sh)
        log.info(
            "shard %s/%s: reading %s",
            self.stream,
            sh.shard_id,
            f"after checkpoint {start}" if start is not None else f"from {position.value}",
        )

    def apply_end(self, sh: ShardPartition, end: ReadEnd) -> None:
        """What a read of ``sh`` said, whoever read it (a poll here, a Spark task): its
        calls and lag into the metrics, its KPL aggregates, its lineage and its end. No
        store I/O (this may run inside a fetch): children are adopted at the next tick."""
        count_calls(self._metrics, sh, end)
        # No return on errors: an enhanced fan-out poll hands out buffered records with
        # the error its thread retried meanwhile (a polling one has none then).
        for seq in end.aggregates:
            sh.aggregates[seq] = None
        if end.skipped or end.corrupt:
            count_odd_aggregates(self._metrics, sh, end)
        if end.child_shards:
            self.map.add_children(end.child_shards)
            self.to_adopt.update(c.shard_id for c in end.child_shards)
        if end.ended and not end.child_shards:
            # No ChildShards in the last answer (some emulators, older API paths):
            # list the shards on the next tick instead of after the refresh interval.
            self.refresh_at = min(self.refresh_at, self._clock())
        if end.ended and sh.state is ShardState.OPEN:
            sh.state = check_transition(sh.shard_id, sh.state, ShardState.DRAINING)
            self.draining.append(sh)
            log.info(
                "shard %s/%s is closed; draining it before its children", self.stream, sh.shard_id
            )

    def end_drained(self, now: float) -> None:
        for sh in list(self.draining):
            if not sh.drained or not self._save(sh, now) or not self._committer.mark_ended(sh):
                continue
            sh.state = check_transition(sh.shard_id, sh.state, ShardState.ENDED)
            self.draining.remove(sh)
            self.drop_from_rotation(sh)
            if sh.reader is not None:
                sh.reader.getter.close()
            sh.reader = sh.cursor = None
            self.map.mark_ended(sh.shard_id)
            log.info(
                "shard %s/%s ended; children: %s",
                self.stream,
                sh.shard_id,
                self.map.children(sh.shard_id),
            )
            self.adopt_new(self.map.children(sh.shard_id))
        self.start_ready()

    def drop_from_rotation(self, sh: ShardPartition) -> None:
        try:
            idx = self.rotation.index(sh)
        except ValueError:
            return
        del self.rotation[idx]
        if idx < self.cursor:
            self.cursor -= 1

    def adopt_new(self, shard_ids: Iterable[str]) -> None:
        """Adopt owned shards not seen before, with their stored checkpoints.

        A store that cannot be read now leaves them queued: ``_tick`` tries again
        with backoff (logged, counted in ``checkpoint_store_errors``).
        """
        wanted = self.to_adopt.union(shard_ids)
        fresh = sorted(s for s in wanted if self.owns(s) and s not in self.shards)
        self.to_adopt.clear()
        if not fresh:
            return
        assert self._committer.store is not None
        try:
            stored = self._committer.store.load(self.stream)
        except CheckpointStoreUnavailableError as exc:
            self.to_adopt.update(fresh)
            self.store_error(f"adopting shards {fresh}", exc)
            return
        self._store_failures = 0
        for shard_id in fresh:
            cp = stored.get(shard_id)
            if cp is not None and cp.shard_end:
                self.map.mark_ended(shard_id)
            self.adopt(shard_id, cp)

    def store_error(self, what: str, exc: CheckpointError) -> None:
        """Count a store error and schedule the retry of what it stopped."""
        self._store_failures += 1
        delay = self._store_backoff.delay(self._store_failures)
        self.adopt_at = self._clock() + delay
        self._metrics.increment("checkpoint_store_errors", stream=self.stream)
        log.warning(
            "checkpoint store unavailable while %s; retrying in %.1fs: %s", what, delay, exc
        )

    def refresh(self, now: float) -> None:
        assert self.api is not None
        try:
            if self.config.streams and self.api.created is not None:
                self.api.check_identity()  # it counts with streams (startup.claim_identity)
            shards = self.api.list_shards()
        except KinesisError as exc:
            if not exc.retriable:
                raise
            log.warning(
                "ListShards of %s failed, retrying in %.0fs: %s", self.stream, _REFRESH_RETRY, exc
            )
            self.refresh_at = now + _REFRESH_RETRY
            return
        self.refresh_at = now + self.config.shard_refresh_interval
        new = self.map.update(shards)
        if new:
            log.info("new shards of %s: %s", self.stream, [s.shard_id for s in new])
        self.adopt_new(self.map.ids())
        self.check_lineage(now)

    def check_lineage(self, now: float) -> None:
        """Start WAITING shards whose parents ended, here or (per the store) elsewhere."""
        self.lineage_at = now + self.config.checkpoint_interval
        waiting = [sh for sh in self.shards.values() if sh.state is ShardState.WAITING]
        if not waiting:
            return
        foreign = {
            p
            for sh in waiting
            for p in self.map.pending_parents(sh.shard_id)
            if p not in self.shards
        }
        if foreign:
            assert self._committer.store is not None
            try:
                stored = self._committer.store.load(self.stream)
            except CheckpointStoreUnavailableError as exc:
                log.warning("cannot check parent shards of %s in the store: %s", self.stream, exc)
                stored = {}
            for p in foreign:
                cp = stored.get(p)
                if cp is not None and cp.shard_end:
                    self.map.mark_ended(p)
        self.start_ready()

    # ------------------------------------------------------------------ ownership
    def set_owned(self, shard_ids: Iterable[str] | None) -> None:
        """Read only these shards (None: all). A released shard's checkpoint is
        flushed first and its in-flight records are left to the next owner; an
        added shard's checkpoint is loaded now, and it starts once its parents ended."""
        owned = None if shard_ids is None else frozenset(shard_ids)
        self.owned = owned
        now = self._clock()
        for shard_id in list(self.shards):
            if not self.owns(shard_id):
                self.release(self.shards[shard_id], now)
        if owned is not None and any(s not in self.map for s in owned):
            self.refresh(now)
        assert self._committer.store is not None
        missing = [s for s in self.map.ids() if self.owns(s) and s not in self.shards]
        if missing:
            try:
                stored = self._committer.store.load(self.stream)
            except CheckpointStoreUnavailableError as exc:
                self.to_adopt.update(missing)
                self.store_error(f"adopting shards {missing}", exc)
                return
            for cp in stored.values():
                if cp.shard_end:
                    self.map.mark_ended(cp.shard_id)
            for shard_id in missing:
                self.adopt(shard_id, stored.get(shard_id))
            self.check_lineage(now)
        if owned is not None:
            unknown = sorted(s for s in owned if s not in self.map)
            if unknown:
                log.warning("owned shards not in stream %s: %s", self.stream, unknown)

    def drain(self, shard_ids: Iterable[str]) -> None:
        """Stop reading new records from these shards ahead of giving them up.

        Their due retries are still handed out and their acks and fails taken,
        so their in-flight records can finish (:meth:`in_flight_of`); every other
        shard keeps flowing. A shard not in ``shard_ids`` reads again (a shard
        assigned back before it left). Release them with :meth:`set_owned_shards`.
        """
        draining = frozenset(shard_ids)
        for shard_id, sh in self.shards.items():
            sh.releasing = shard_id in draining

    def in_flight_of(self, shard_ids: Iterable[str]) -> int:
        """Records handed out and not done on these shards (awaiting retries included)."""
        total = 0
        for shard_id in shard_ids:
            sh = self.shards.get(shard_id)
            if sh is not None and sh.tracker is not None:
                total += sh.tracker.in_flight
        return total

    def release(self, sh: ShardPartition, now: float) -> None:
        if sh.tracker is not None and not sh.fenced:
            self._save(sh, now)
        self.shards.pop(sh.shard_id, None)
        self.drop_from_rotation(sh)
        if sh.reader is not None:
            sh.reader.getter.close()
        if sh in self.draining:
            self.draining.remove(sh)
        log.info(
            "released shard %s/%s (%d in flight left to the next owner)",
            self.stream,
            sh.shard_id,
            sh.tracker.in_flight if sh.tracker is not None else 0,
        )

    def close_getters(self) -> None:
        """Stop every getter's subscription thread (a later poll starts it again);
        all together, so threads stuck in a call cost one timeout, not one each."""
        close_getters(sh.reader.getter for sh in self.shards.values() if sh.reader is not None)

    def close(self) -> None:
        """Stop every subscription and close the getter factory (which deregisters the
        consumer if the config asks it to)."""
        self.close_getters()
        if self.getters is not None:
            self.getters.close()


def pacing_of(config: SpoutConfig) -> Pacing:
    """The waits between reads of a shard read elsewhere (:class:`ShardCursor`)."""
    return Pacing(
        config.empty_shard_backoff,
        config.empty_shard_backoff_max,
        config.throttle_backoff,
        max(config.throttle_backoff_max, config.throttle_backoff),
    )


def count_calls(metrics: MetricsCollector, sh: ShardPartition, end: ReadEnd) -> None:
    """A read's calls: their durations, their errors, the lag the last one answered."""
    stream, shard = sh.stream, sh.shard_id
    for seconds in end.seconds:
        metrics.observe("get_records_seconds", seconds, shard=shard, stream=stream)
    for err in end.errors:
        if isinstance(err, ThrottledError | ResourceInUseError):
            metrics.increment("kinesis_throttled", shard=shard, stream=stream)
        elif isinstance(err, ExpiredIteratorError):
            metrics.increment("iterators_expired", shard=shard, stream=stream)
        else:
            metrics.increment("kinesis_errors", shard=shard, stream=stream)
    if end.events and end.behind is not None:
        metrics.gauge("millis_behind_latest", end.behind, shard=shard, stream=stream)


def count_odd_aggregates(metrics: MetricsCollector, sh: ShardPartition, end: ReadEnd) -> None:
    """Count the skipped empty and the corrupt KPL aggregates of a read; note a skipped
    one after every record of the read (the partition counts it done once they are out)."""
    stream, shard = sh.stream, sh.shard_id
    if end.skipped:
        metrics.increment("empty_aggregates_skipped", end.skipped, shard=shard, stream=stream)
        log.info("shard %s/%s: skipped %d empty KPL aggregate(s)", stream, shard, end.skipped)
    if end.corrupt:
        metrics.increment("corrupt_aggregates", end.corrupt, shard=shard, stream=stream)
    if end.skipped_tail is not None:
        sh.skip_tail = end.skipped_tail
