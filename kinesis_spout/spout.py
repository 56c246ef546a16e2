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
from kinesis_spout.deadletter.open import open_dead_letter_sink
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

    The class is over 300 lines because it is the whole public face: Storm's spout
    contract, ownership, checkpoints and the read-only views (stats, shards, metrics),
    one short method each; the work is done by the parts it holds (:mod:`kinesis_spout.core`:
    the shard set, the round robin, the ack router, the committer).
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
    ) -> None:
        self.config = config
        self._lease = ReaderLease(config, reader_label(type(self).__name__), job_lease)
        self._sleep = sleep
        self._own_store = store is None
        self._store: CheckpointStore | None = store
        self._own_dead = dead_letters is None
        self._endpoint = MetricsEndpoint.of(config) if metrics is None else None
        if metrics is None:
            metrics = self._endpoint.metrics if self._endpoint is not None else NoopMetrics()
        self._metrics: MetricsCollector = metrics
        self._committer = Committer(config, self._metrics)
        self._clock = clock
        self._client = client
        self._api: KinesisApi | None = None
        self._throttle_backoff = throttle_backoff(config, rng or random.Random())
        self._retry = RetryPolicy.of(config)  # the trackers' limit and backoff, the acks' age
        self._set = ShardSet(
            config,
            self._committer,
            self._metrics,
            clock,
            save=self._save,
            throttle_backoff=self._throttle_backoff,
            retry=self._retry,
        )
        self._acks = AckRouter(self._set.shards, self._metrics, clock, self._retry.max_age)
        self._acks.sink = dead_letters
        self._opened = False
        self._closed = False
        self._active = True
        self._checkpoint_at = _INF
        self._early_save_at = max(1, config.max_in_flight // 2)
        self._rr = RoundRobin(
            self._set,
            self._metrics,
            max_in_flight=config.max_in_flight,
            message_timeout=config.message_timeout,
            make_room=self._make_room,
            early_save_at=self._early_save_at,
        )

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Check the stream, list its shards, load checkpoints and start reading.

        An unknown stream, an unreachable endpoint or rejected credentials raise
        errors naming the stream, the endpoint and the region."""
        if self._opened:
            return
        cfg = self.config
        if self._endpoint is not None:  # first: a taken port fails before anything is read
            self._endpoint.start()
        try:  # a bad stream, a corrupt checkpoint, a store error: leave nothing open
            self._open_parts(cfg)
        except BaseException:
            self._close_own()
            raise
        now = self._clock()
        self._checkpoint_at = now + cfg.checkpoint_interval
        self._set.refresh_at = now + cfg.shard_refresh_interval
        self._set.lineage_at = now + cfg.checkpoint_interval
        self._opened = True

    def _open_parts(self, cfg: SpoutConfig) -> None:
        """The job lease taken, the stream described, the store and the dead-letter sink
        opened, shards adopted."""
        self._lease.take()  # first: a second reader of the job reads nothing
        if self._client is None:
            self._client = make_client(cfg.endpoint_url, cfg.region, profile=cfg.profile)
        self._api = KinesisApi(self._client, cfg.stream_name)
        self._set.api = self._api
        endpoint = getattr(getattr(self._client, "meta", None), "endpoint_url", cfg.endpoint_url)
        status, shards = describe_stream(
            self._api, cfg, endpoint, backoff=self._throttle_backoff, sleep=self._sleep
        )
        getters = self._set.getters = GetterFactory(
            cfg, self._api, self._throttle_backoff, subscribe=self._subscribes
        )
        getters.open()  # consumer = "efo": registered if absent, ACTIVE
        if self._store is None:
            self._store = open_config_store(cfg)
        self._committer.store = self._store
        if self._acks.sink is None:
            self._acks.sink = open_dead_letter_sink(
                cfg.dead_letter,
                cfg.job_name,
                cfg.dead_letter_reasons,
                region=cfg.region,
                profile=cfg.profile,
            )
        checkpoints = load_and_adopt(self._set, self._committer, self._store, self._api, shards)
        log.info(
            "opened stream %s (%s) at %s: %d shards, %d owned, %d with checkpoints",
            cfg.stream_name,
            status,
            endpoint,
            len(self._set.map),
            len(self._set.shards),
            len(checkpoints),
        )

    #: Read shards by subscriptions here when ``consumer = "efo"`` (executor reads: no).
    _subscribes = True

    def _close_own(self) -> None:
        """Stop the subscriptions (``ShardSet.close``); close what this spout opened itself."""
        self._set.close()
        if self._endpoint is not None:
            self._endpoint.close()
        if self._own_store and self._store is not None:
            self._store.close()
            self._store = None
        if self._own_dead and self._acks.sink is not None:
            self._acks.sink.close()
            self._acks.sink = None
        self._lease.release()  # last: the checkpoints are written

    def activate(self) -> None:
        """Resume emitting after :meth:`deactivate`."""
        self._active = True

    def deactivate(self) -> None:
        """Stop emitting (acks and fails are still taken; checkpoints continue).
        Subscriptions stop too; ``activate`` and the next batch resume them."""
        self._active = False
        self._set.close_getters()

    def __enter__(self) -> KinesisSpout:
        """``with KinesisSpout(config) as spout:`` opens it, and closes it (final
        checkpoint) however the block is left; see :mod:`kinesis_spout.stopping`."""
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """End drained shards, write every checkpoint, close what the spout opened."""
        if self._closed:
            return
        try:
            if self._opened:
                now = self._clock()
                self._set.end_drained(now)
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
        self._check_open()
        self._lease.check()
        if self._rr.pending_error is not None:
            exc, self._rr.pending_error = self._rr.pending_error, None
            raise exc
        now = self._clock()
        self._tick(now)
        if not self._active or max_records <= 0:
            return []
        return self._rr.take(max_records, now)

    def poll_delay(self) -> float:
        """Seconds until something may be ready (0: call ``next_batch`` now)."""
        self._check_open()
        now = self._clock()
        t = min(self._checkpoint_at, self._set.refresh_at)
        if self._rr.pending_error is not None or any(sh.drained for sh in self._set.draining):
            return 0.0
        if self._active:
            t = self._rr.wake_at(now, t)
        return max(0.0, t - now)

    # ------------------------------------------------------------------ acks and fails
    def ack(self, message_id: MessageRef) -> None:
        """The record is fully processed. Unknown or repeated acks are ignored (counted)."""
        self._acks.ack(message_id)

    def ack_many(self, ids: Iterable[MessageRef]) -> None:
        """``ack`` for each id (one tracker call per shard)."""
        self._acks.ack_many(ids)

    def fail(self, message_id: MessageRef, error: str | None = None) -> None:
        """The record failed: retried later, or dead-lettered once out of retries."""
        self._acks.fail(message_id, error)

    def fail_many(self, items: Iterable[tuple[MessageRef, str | None]]) -> None:
        """``fail`` for each ``(id, error)``."""
        self._acks.fail_many(items)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, force: bool = False) -> None:
        """Save the checkpoints that moved, if the interval passed (or ``force``)."""
        self._check_open()
        now = self._clock()
        if force or now >= self._checkpoint_at:
            self._write_checkpoints(now)

    def _write_checkpoints(self, now: float) -> None:
        self._committer.save_all(list(self._set.shards.values()), self._save, now)
        self._checkpoint_at = now + self.config.checkpoint_interval

    def _save(self, sh: ShardPartition, now: float) -> bool:
        """Save ``sh``'s checkpoint if it moved; False if it could not be (yet)."""
        if sh.dead_pending and not sh.fenced:
            # The tracker keeps records with a pending dead letter below its checkpoint,
            # so what is below them may be saved even while a write still fails.
            self._acks.flush_dead(sh)
        return self._committer.save(sh, now)

    def _make_room(self, sh: ShardPartition, now: float) -> int:
        """``sh`` handed out ``max_in_flight`` records since its saved checkpoint:
        save early if that frees at least half the window (so a crash never
        replays more than ``max_in_flight`` records of a shard, and an early
        save costs one write per half window, never one per record)."""
        if sh.savable() >= self._early_save_at:
            self._save(sh, now)
        return sh.room(self.config.max_in_flight)

    def _tick(self, now: float) -> None:
        """Housekeeping on every call: expiries, drained shards, checkpoints, refresh."""
        if self._set.to_adopt and now >= self._set.adopt_at:
            self._set.adopt_new(())
        if self.config.message_timeout:
            self._rr.expire(now, self._acks.after_fail)
        if self._set.draining:
            self._set.end_drained(now)
        if now >= self._checkpoint_at:
            self._write_checkpoints(now)
        if now >= self._set.refresh_at:
            self._set.refresh(now)
        elif now >= self._set.lineage_at:
            self._set.check_lineage(now)

    # ------------------------------------------------------------------ views
    @property
    def metrics(self) -> MetricsCollector:
        """Where this spout reports (its own endpoint's with ``metrics_port`` and none given)."""
        return self._metrics

    @property
    def in_flight(self) -> int:
        return self._set.in_flight_of(self._set.shards)

    def shard_states(self) -> dict[str, ShardState]:
        """The lifecycle state of every owned shard."""
        return {s: sh.state for s, sh in sorted(self._set.shards.items())}

    @property
    def shards(self) -> Mapping[str, ShardInfo]:
        """Every shard of the stream known to this spout (owned or not)."""
        return MappingProxyType(self._set.map.infos())

    def stats(self) -> SpoutStats:
        return spout_stats(self._set.shards, self._rr, self._acks, self._committer, self._clock())

    @property
    def is_idle(self) -> bool:
        """Nothing in flight or buffered, and every owned shard caught up or ended."""
        return self._opened and all(sh.idle for sh in self._set.shards.values())

    @property
    def is_active(self) -> bool:
        return self._active

    # ------------------------------------------------------------------ ownership
    def set_owned_shards(self, shard_ids: Iterable[str] | None) -> None:
        """Read only these shards (None: all). A released shard's checkpoint is
        flushed first and its in-flight records are left to the next owner; an
        added shard's checkpoint is loaded now, and it starts once its parents ended."""
        self._check_open()
        self._set.set_owned(shard_ids)

    def drain_shards(self, shard_ids: Iterable[str]) -> None:
        """Stop reading new records from these shards ahead of giving them up (their
        retries, acks and fails go on; every other shard keeps flowing)."""
        self._check_open()
        self._set.drain(shard_ids)

    def in_flight_of(self, shard_ids: Iterable[str]) -> int:
        """Records handed out and not done on these shards (awaiting retries included)."""
        return self._set.in_flight_of(shard_ids)

    def _check_open(self) -> None:
        if not self._opened:
            raise KinesisSpoutError("KinesisSpout: call open() first")
        if self._closed:
            raise KinesisSpoutError("KinesisSpout: closed")
