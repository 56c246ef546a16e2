"""The Kinesis spout: Storm's spout contract over every shard of one stream.

``open`` / ``next_tuple`` / ``next_batch`` / ``ack`` / ``fail`` /
``activate`` / ``deactivate`` / ``close``, single-threaded, never blocking:
``next_batch`` returns ``[]`` when nothing is ready and ``poll_delay`` says
how long the caller may sleep.

Per shard it owns the spout keeps a :class:`~tracker.InflightRecordTracker`
and a :class:`~kinesis_spout.kinesis.buffered.BufferedShardGetter`:

* due retries are handed out before new records; new records come
  round-robin from the shards; a shard that has handed out ``max_in_flight``
  records since its last *saved* checkpoint is not fetched (acked but unsaved
  records count too: that is what bounds the replay after a crash to
  ``max_in_flight`` per shard; a full window saves early when that frees half
  of it);
* a record that fails ``retry_limit + 1`` times is written (fsynced) to the
  dead-letter sink, exactly once, and only then counts as done (the tracker
  keeps it pending until the write returned; an interrupted write stays
  pending and holds the checkpoint below the record);
* the tracker's checkpoint ("everything up to here is done") is saved per
  ``checkpoint_interval``, when a shard is released and on ``close``, never
  per record. A store that refuses a save as stale means another owner is
  ahead: the shard stops emitting (the lease layer sorts it out);
* a closed shard is drained, every record done, then marked ended in the
  store; only then do its children start (:mod:`kinesis_spout.kinesis.shards`).

Message ids are ``"<shardId>:<sequence>[:<sub>]"``.

KPL aggregates and checkpoints: a checkpoint ``(seq, 0)`` always means "the
whole Kinesis record ``seq`` is done", so a resume uses
``AFTER_SEQUENCE_NUMBER seq``. When the tracker's checkpoint is the first user
record of a multi-record aggregate the spout keeps the previous checkpoint
for that round instead; a checkpoint ``(seq, sub > 0)`` resumes
``AT_SEQUENCE_NUMBER seq`` and skips sub-records ``<= sub``.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from kinesis_spout.checkpoint.base import CheckpointStore
from kinesis_spout.checkpoint.factory import open_config_store
from kinesis_spout.config import SpoutConfig
from kinesis_spout.core.acks import AckRouter, MessageRef
from kinesis_spout.core.committer import Committer
from kinesis_spout.core.getters import GetterFactory, throttle_backoff
from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.core.readerlease import ReaderLease, reader_label
from kinesis_spout.core.retrypolicy import RetryPolicy
from kinesis_spout.core.rotation import RoundRobin
from kinesis_spout.core.shardset import ShardSet
from kinesis_spout.core.startup import describe_stream, load_and_adopt
from kinesis_spout.core.stats import SpoutStats, spout_stats
from kinesis_spout.deadletter import DeadLetterSink
from kinesis_spout.deadletter.open import open_config_sink
from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.metrics import MetricsCollector, NoopMetrics
from kinesis_spout.observability.endpoint import MetricsEndpoint
from kinesis_spout.records import Record, ShardInfo, ShardState

log = logging.getLogger(__name__)

_INF = math.inf


class KinesisSpout:
    """Reads every shard of ``config.stream_name`` with Storm-grade reliability.

    Not thread-safe: call every method from one thread. ``store``,
    ``dead_letters``, ``client`` and ``metrics`` given by the caller stay the
    caller's (``close`` does not close them). With no ``metrics`` and
    ``metrics_port`` set, the spout serves its own Prometheus endpoint from
    ``open`` (a taken port fails there, first) to ``close``. ``open`` takes the
    job lease of ``checkpoint_store`` and ``job_name`` (one reader per job; see
    :mod:`kinesis_spout.core.readerlease`), ``close`` lets it go; ``job_lease=False``
    is for readers fenced otherwise (shard leases, a driver holding it already).
    ``subscribe=False``: with ``consumer = "efo"`` the shards are not subscribed here
    (a reader elsewhere subscribes: Spark read tasks). ``reader`` names what reads in the
    job lease's record.

    A reader that reads the shards elsewhere (the Spark driver's
    :class:`~kinesis_spout.spark.read.planner.ExecutorReadPlanner`) plans and applies
    through the same public parts this spout's own loop uses: :attr:`shard_set`,
    :attr:`acks`, :attr:`rotation`, :meth:`housekeep`, :meth:`save`.

    The class is over 300 lines (the module over 400) because it is the whole public
    face: Storm's spout contract, ownership, checkpoints and the read-only views (stats,
    shards, metrics), one short method each; the work is done by the parts it holds
    (:mod:`kinesis_spout.core`: the shard set, the round robin, the ack router, the
    committer).
    """

    def __init__(
        self,
        config: SpoutConfig,
        *,
        store: CheckpointStore | None = None,
        dead_letters: DeadLetterSink | None = None,
        metrics: MetricsCollector | None = None,
        clock: Callable[[], float] = time.monotonic,
        client: Any | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        job_lease: bool = True,
        subscribe: bool = True,
        reader: str = "KinesisSpout",
    ) -> None:
        self.config = config
        self._lease = ReaderLease(config, reader_label(reader), job_lease)
        self._subscribes = subscribe
        self.sleep = sleep
        self._own_store = store is None
        self._store: CheckpointStore | None = store
        self._own_dead = dead_letters is None
        self._endpoint = MetricsEndpoint.of(config) if metrics is None else None
        if metrics is None:
            metrics = self._endpoint.metrics if self._endpoint is not None else NoopMetrics()
        self._metrics: MetricsCollector = metrics
        self._committer = Committer(config, self._metrics)
        self.clock = clock
        self._client = client
        self.api: KinesisApi | None = None  # from open()
        self.throttle_backoff = throttle_backoff(config, rng or random.Random())
        self._retry = RetryPolicy.of(config)  # the trackers' limit and backoff, the acks' age
        self.shard_set = ShardSet(
            config,
            self._committer,
            self._metrics,
            clock,
            save=self.save,
            throttle_backoff=self.throttle_backoff,
            retry=self._retry,
        )
        """The shards this spout owns, with their trackers and getters."""
        self.acks = AckRouter(self.shard_set.shards, self._metrics, clock, self._retry.max_age)
        """Where acks and fails go: the trackers, retries, dead letters."""
        self.acks.sink = dead_letters
        self._opened = False
        self._closed = False
        self._active = True
        self.next_checkpoint_at = _INF  # clock time of the next save of every checkpoint
        self.early_save_at = max(1, config.max_in_flight // 2)
        """Records read since a shard's saved checkpoint at which it saves early."""
        self.rotation = RoundRobin(
            self.shard_set,
            self._metrics,
            max_in_flight=config.max_in_flight,
            message_timeout=config.message_timeout,
            make_room=self.make_room,
            early_save_at=self.early_save_at,
        )
        """The round robin over the shards, and its counters."""

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Check the stream, list its shards, load checkpoints and start reading.

        An unknown stream, an unreachable endpoint or rejected credentials raise
        errors naming the stream, the endpoint and the region."""
        if self._opened:
            return
        cfg = self.config
        try:  # a bad stream, a corrupt checkpoint, a store error: leave nothing open
            self._lease.take()  # first: a second copy of the job is named as such
            if self._endpoint is not None:  # then the port, before anything is read
                self._endpoint.start()
            self._open_parts(cfg)
        except BaseException:
            self._close_own()
            raise
        now = self.clock()
        self._committer.opened(self.shard_set.shards.values(), now)
        self.next_checkpoint_at = now + cfg.checkpoint_interval
        self.shard_set.refresh_at = now + cfg.shard_refresh_interval
        self.shard_set.lineage_at = now + cfg.checkpoint_interval
        self._opened = True

    def _open_parts(self, cfg: SpoutConfig) -> None:
        """The stream described, the store and the dead-letter sink opened, shards
        adopted (the job lease is taken already)."""
        if self._client is None:
            self._client = make_client(
                cfg.endpoint_url, cfg.region, profile=cfg.profile, role=cfg.assumed_role
            )
        self.api = KinesisApi(self._client, cfg.stream_name, cfg.stream_arn)
        self.shard_set.api = self.api
        endpoint = getattr(getattr(self._client, "meta", None), "endpoint_url", cfg.endpoint_url)
        status, shards = describe_stream(
            self.api, cfg, endpoint, backoff=self.throttle_backoff, sleep=self.sleep
        )
        getters = self.shard_set.getters = GetterFactory(
            cfg, self.api, self.throttle_backoff, subscribe=self._subscribes
        )
        getters.open()  # consumer = "efo": registered if absent, ACTIVE
        if self._store is None:
            self._store = open_config_store(cfg)
        self._committer.store = self._store
        if self.acks.sink is None:
            self.acks.sink = open_config_sink(cfg)
        checkpoints = load_and_adopt(self.shard_set, self._committer, self._store, self.api, shards)
        log.info(
            "opened stream %s (%s) at %s: %d shards, %d owned, %d with checkpoints",
            cfg.stream_name,
            status,
            endpoint,
            len(self.shard_set.map),
            len(self.shard_set.shards),
            len(checkpoints),
        )

    def _close_own(self) -> None:
        """Stop the subscriptions (``ShardSet.close``); close what this spout opened itself."""
        self.shard_set.close()
        if self._endpoint is not None:
            self._endpoint.close()
        if self._own_store and self._store is not None:
            self._store.close()
            self._store = None
        if self._own_dead and self.acks.sink is not None:
            self.acks.sink.close()
            self.acks.sink = None
        self._lease.release()  # last: the checkpoints are written

    def activate(self) -> None:
        """Resume emitting after :meth:`deactivate`."""
        self._active = True

    def deactivate(self) -> None:
        """Stop emitting (acks and fails are still taken; checkpoints continue).
        Subscriptions stop too; ``activate`` and the next batch resume them."""
        self._active = False
        self.shard_set.close_getters()

    def __enter__(self) -> KinesisSpout:
        """``with KinesisSpout(config) as spout:`` opens it, and closes it (final
        checkpoint) however the block is left; see :mod:`kinesis_spout.stopping`."""
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """End drained shards, write every checkpoint, close what the spout opened."""
        self._close(save=True)

    def drop(self) -> None:
        """Close without writing any checkpoint: the stream is gone (deleted, or created
        again under its name), and its positions belong to no stream now; another reader
        of the job may already have checkpoints of the new stream under its name."""
        self._close(save=False)

    def _close(self, save: bool) -> None:
        if self._closed:
            return
        try:
            if self._opened and save:
                now = self.clock()
                self.shard_set.end_drained(now)
                self._write_checkpoints(now)
        finally:
            self._closed = True
            log.info("closed stream %s: %s", self.config.stream_name, self.stats())
            self._close_own()

    # ------------------------------------------------------------------ emitting
    def next_tuple(self) -> Record | None:
        """One record (a due retry first, else the next shard round-robin), or None."""
        batch = self.next_batch(1)
        return batch[0] if batch else None

    def next_batch(self, max_records: int) -> list[Record]:
        """Up to ``max_records`` records: due retries first, then new records
        round-robin over the shards. Never blocks; ``[]`` if nothing is ready.

        Makes at most one GetRecords call per shard whose buffer is empty.
        """
        self.check_open()
        self._lease.check()
        if self.rotation.pending_error is not None:
            exc, self.rotation.pending_error = self.rotation.pending_error, None
            raise exc
        now = self.clock()
        self.housekeep(now)
        if not self._active or max_records <= 0:
            return []
        return self.rotation.take(max_records, now)

    def poll_delay(self) -> float:
        """Seconds until something may be ready (0: call ``next_batch`` now)."""
        self.check_open()
        now = self.clock()
        t = min(self.next_checkpoint_at, self.shard_set.refresh_at)
        drained = any(sh.drained for sh in self.shard_set.draining)
        if self.rotation.pending_error is not None or drained:
            return 0.0
        if self._active:
            t = self.rotation.wake_at(now, t)
        return max(0.0, t - now)

    # ------------------------------------------------------------------ acks and fails
    def ack(self, message_id: MessageRef) -> None:
        """The record is fully processed. Unknown or repeated acks are ignored (counted)."""
        self.acks.ack(message_id)

    def ack_many(self, ids: Iterable[MessageRef]) -> None:
        """``ack`` for each id (one tracker call per shard)."""
        self.acks.ack_many(ids)

    def fail(self, message_id: MessageRef, error: str | None = None) -> None:
        """The record failed: retried later, or dead-lettered once out of retries."""
        self.acks.fail(message_id, error)

    def fail_many(self, items: Iterable[tuple[MessageRef, str | None]]) -> None:
        """``fail`` for each ``(id, error)``."""
        self.acks.fail_many(items)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, force: bool = False) -> None:
        """Save the checkpoints that moved, if the interval passed (or ``force``)."""
        self.check_open()
        now = self.clock()
        if force or now >= self.next_checkpoint_at:
            self._write_checkpoints(now)

    def _write_checkpoints(self, now: float) -> None:
        self._committer.save_all(list(self.shard_set.shards.values()), self._before_save, now)
        self.next_checkpoint_at = now + self.config.checkpoint_interval

    def save(self, sh: ShardPartition, now: float) -> bool:
        """Save ``sh``'s checkpoint if it moved; False if it could not be (yet)."""
        self._before_save(sh)
        return self._committer.save(sh, now)

    def _before_save(self, sh: ShardPartition) -> None:
        if sh.dead_pending and not sh.fenced:
            # The tracker keeps records with a pending dead letter below its checkpoint,
            # so what is below them may be saved even while a write still fails.
            self.acks.flush_dead(sh)

    def make_room(self, sh: ShardPartition, now: float) -> int:
        """Records ``sh`` may hand out now, after an early save if that frees at least
        half its replay window (so a crash never replays more than ``max_in_flight``
        records of a shard, and an early save costs one write per half window, never
        one per record). The loop asks when a shard is out of room; the Spark driver
        before each plan, so a micro-batch ahead finds the window saved."""
        if sh.savable() >= self.early_save_at:
            self.save(sh, now)
        return sh.room(self.config.max_in_flight)

    def housekeep(self, now: float) -> None:
        """Housekeeping on every call of the loop (and of a reader elsewhere's plan):
        expiries, drained shards, checkpoints, the shard list, as due at ``now``."""
        if self.shard_set.to_adopt and now >= self.shard_set.adopt_at:
            self.shard_set.adopt_new(())
        if self.config.message_timeout:
            self.rotation.expire(now, self.acks.after_fail)
        if self.shard_set.draining:
            self.shard_set.end_drained(now)
        if now >= self.next_checkpoint_at:
            self._write_checkpoints(now)
        if now >= self.shard_set.refresh_at:
            self.shard_set.refresh(now)
        elif now >= self.shard_set.lineage_at:
            self.shard_set.check_lineage(now)

    # ------------------------------------------------------------------ views
    @property
    def metrics(self) -> MetricsCollector:
        """Where this spout reports (its own endpoint's with ``metrics_port`` and none given)."""
        return self._metrics

    @property
    def in_flight(self) -> int:
        return self.shard_set.in_flight_of(self.shard_set.shards)

    def shard_states(self) -> dict[str, ShardState]:
        """The lifecycle state of every owned shard."""
        return {s: sh.state for s, sh in sorted(self.shard_set.shards.items())}

    @property
    def shards(self) -> Mapping[str, ShardInfo]:
        """Every shard of the stream known to this spout (owned or not)."""
        return MappingProxyType(self.shard_set.map.infos())

    def stats(self) -> SpoutStats:
        shards = self.shard_set.shards
        return spout_stats(shards, self.rotation, self.acks, self._committer, self.clock())

    @property
    def is_idle(self) -> bool:
        """Nothing in flight or buffered, and every owned shard caught up or ended."""
        return self._opened and all(sh.idle for sh in self.shard_set.shards.values())

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._closed

    # ------------------------------------------------------------------ ownership
    def set_owned_shards(self, shard_ids: Iterable[str] | None) -> None:
        """Read only these shards (None: all). A released shard's checkpoint is
        flushed first and its in-flight records are left to the next owner; an
        added shard's checkpoint is loaded now, and it starts once its parents ended."""
        self.check_open()
        self.shard_set.set_owned(shard_ids)

    def drain_shards(self, shard_ids: Iterable[str]) -> None:
        """Stop reading new records from these shards ahead of giving them up (their
        retries, acks and fails go on; every other shard keeps flowing)."""
        self.check_open()
        self.shard_set.drain(shard_ids)

    def in_flight_of(self, shard_ids: Iterable[str]) -> int:
        """Records handed out and not done on these shards (awaiting retries included)."""
        return self.shard_set.in_flight_of(shard_ids)

    def check_open(self) -> None:
        """Raise unless the spout is open and not closed."""
        if not self._opened:
            raise KinesisSpoutError("KinesisSpout: call open() first")
        if self._closed:
            raise KinesisSpoutError("KinesisSpout: closed")
