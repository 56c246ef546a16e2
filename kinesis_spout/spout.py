"""The Kinesis spout: Storm's spout contract over every shard of one stream or several.

``open`` / ``next_tuple`` / ``next_batch`` / ``ack`` / ``fail`` / ``activate`` /
``deactivate`` / ``close``, single-threaded, never blocking: ``next_batch`` returns ``[]``
when nothing is ready and ``poll_delay`` says how long the caller may sleep. The reading
core under it (:mod:`kinesis_spout.core`) is keyed by ``(stream, shard)``: one spout reads
``stream_name`` or every stream of ``streams``, each stream offered an equal share of
each batch; behaviour per shard (retries first, a replay window of ``max_in_flight``,
dead letters written ahead, checkpoints that never move back, children after their
parents) is in ``docs/reader.md``.

Message ids are ``"<shardId>:<sequence>[:<sub>]"``; a spout of several streams takes
``"<stream>/<shardId>:..."`` (:attr:`Record.stream_message_id`) or the record itself.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from kinesis_spout.checkpoint.base import CheckpointStore
from kinesis_spout.checkpoint.factory import open_config_store
from kinesis_spout.config import SpoutConfig
from kinesis_spout.core.acks import AckRouter, MessageRef
from kinesis_spout.core.committer import Committer
from kinesis_spout.core.getters import throttle_backoff
from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.core.readerlease import ReaderLease, reader_label
from kinesis_spout.core.retrypolicy import RetryPolicy
from kinesis_spout.core.rotation import RoundRobin
from kinesis_spout.core.stats import SpoutStats, spout_stats
from kinesis_spout.core.streams import ReaderStreams, StreamControl
from kinesis_spout.deadletter import DeadLetterSink
from kinesis_spout.deadletter.open import open_config_sink
from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.metrics import MetricsCollector, NoopMetrics
from kinesis_spout.observability.endpoint import MetricsEndpoint
from kinesis_spout.records import Record, ShardInfo, ShardKey, ShardState

log = logging.getLogger(__name__)

_INF = math.inf


class KinesisSpout:
    """Reads every shard of the config's streams with Storm-grade reliability.

    Not thread-safe: call every method from one thread. ``store``, ``dead_letters``,
    ``client`` and ``metrics`` given by the caller stay the caller's (``close`` does not
    close them). With no ``metrics`` and ``metrics_port`` set, the spout serves its own
    Prometheus endpoint from ``open`` to ``close``. ``open`` takes the job lease of
    ``checkpoint_store`` and ``job_name`` (one reader per job; see
    :mod:`kinesis_spout.core.readerlease`), ``close`` lets it go; ``job_lease=False`` is
    for readers fenced otherwise (shard leases, a driver holding it already).
    ``read_here=False``: the shards are read elsewhere (Spark tasks): the spout keeps
    where each read goes on (a :class:`~kinesis_spout.core.cursor.ShardCursor`), not a
    getter. ``reader`` names what reads in the job lease's record.

    The class is over 300 lines because it is the whole public face: Storm's spout
    contract, ownership, checkpoints and the read-only views, one short method each; the
    work is done by the parts it holds (:mod:`kinesis_spout.core`).
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
        read_here: bool = True,
        reader: str = "KinesisSpout",
    ) -> None:
        self.config = config
        self._lease = ReaderLease(config, reader_label(reader), job_lease)
        self._read_here = read_here
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
        self.throttle_backoff = throttle_backoff(config, rng or random.Random())
        self._retry = RetryPolicy.of(config)  # the trackers' limit and backoff, the acks' age
        self.streams = ReaderStreams(
            config,
            self._committer,
            self._metrics,
            clock,
            save=self.save,
            throttle_backoff=self.throttle_backoff,
            retry=self._retry,
        )
        """The streams read, each its shards (with their trackers and getters or cursors)."""
        self.acks = AckRouter(self.streams.find, self._metrics, clock, self._retry.max_age)
        """Where acks and fails go: the trackers, retries, dead letters."""
        self.acks.sink = dead_letters
        self._opened = False
        self._closed = False
        self._active = True
        self.next_checkpoint_at = _INF  # clock time of the next save of every checkpoint
        self.early_save_at = max(1, config.max_in_flight // 2)
        """Records read since a shard's saved checkpoint at which it saves early."""
        self.rotation = RoundRobin(
            self.streams.ordered,
            self._metrics,
            max_in_flight=config.max_in_flight,
            message_timeout=config.message_timeout,
            make_room=self.make_room,
            early_save_at=self.early_save_at,
        )
        """The round robin over the shards, and its counters."""

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Check the streams, list their shards, load checkpoints and start reading.

        An unknown stream, an unreachable endpoint or rejected credentials raise
        errors naming the stream, the endpoint and the region."""
        if self._opened:
            return
        cfg = self.config
        try:  # a bad stream, a corrupt checkpoint, a store error: leave nothing open
            self._lease.take()  # first: a second copy of the job is named as such
            if self._endpoint is not None:  # then the port, before anything is read
                self._endpoint.start()
            if self._client is None:
                self._client = make_client(
                    cfg.endpoint_url, cfg.region, profile=cfg.profile, role=cfg.assumed_role
                )
            if self._store is None:
                self._store = open_config_store(cfg)
            self._committer.store = self._store
            if self.acks.sink is None:
                self.acks.sink = open_config_sink(cfg)
            self.streams.open(
                self._client,
                self._store,
                self._committer,
                read_here=self._read_here,
                sleep=self.sleep,
            )
        except BaseException:
            self._close_own()
            raise
        now = self.clock()
        self._committer.opened(self.streams.partitions(), now)
        self.next_checkpoint_at = now + cfg.checkpoint_interval
        for st in self.streams.ordered():
            st.refresh_at = now + cfg.shard_refresh_interval
            st.lineage_at = now + cfg.checkpoint_interval
        self._opened = True

    def _close_own(self) -> None:
        """Stop the subscriptions; close what this spout opened itself."""
        self.streams.close()
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
        self.streams.close_getters()

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
                now = self.clock()
                for st in self.streams.ordered():
                    st.end_drained(now)
                self._write_checkpoints(now)
        finally:
            self._closed = True
            log.info("closed %s: %s", ", ".join(self.config.stream_names), self.stats())
            self._close_own()

    # ------------------------------------------------------------------ emitting
    def next_tuple(self) -> Record | None:
        """One record (a due retry first, else the next shard round-robin), or None."""
        batch = self.next_batch(1)
        return batch[0] if batch else None

    def next_batch(self, max_records: int) -> list[Record]:
        """Up to ``max_records`` records: due retries first, then new records
        round-robin over the streams and their shards. Never blocks; ``[]`` if nothing
        is ready. Makes at most one GetRecords call per shard whose buffer is empty."""
        self.check_open()
        self._lease.check()
        if self.rotation.pending_error is not None:
            (stream, exc), self.rotation.pending_error = self.rotation.pending_error, None
            self.streams.failed(stream, exc)  # raised, unless a stream of several is gone
        now = self.clock()
        self.housekeep(now)
        if not self._active or max_records <= 0:
            return []
        return self.rotation.take(max_records, now)

    def poll_delay(self) -> float:
        """Seconds until something may be ready (0: call ``next_batch`` now)."""
        self.check_open()
        now = self.clock()
        sets = self.streams.ordered()
        t = min([self.next_checkpoint_at, *(st.refresh_at for st in sets)])
        drained = any(sh.drained for st in sets for sh in st.draining)
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
        self._committer.save_all(list(self.streams.partitions()), self._before_save, now)
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
        one per record). The loop asks when a shard is out of room; the Spark planner
        before each plan, so a micro-batch ahead finds the window saved."""
        if sh.savable() >= self.early_save_at:
            self.save(sh, now)
        return sh.room(self.config.max_in_flight)

    def housekeep(self, now: float, held: Collection[ShardKey] = ()) -> None:
        """Housekeeping on every call of the loop (and of the Spark planner): expiries
        (not of the shards ``held`` by running Spark tasks), each stream's shards,
        checkpoints, as due at ``now``."""
        if self.config.message_timeout:
            self.rotation.expire(now, self.acks.after_fail, held)
        self.streams.housekeep(now)
        if now >= self.next_checkpoint_at:
            self._write_checkpoints(now)

    # ------------------------------------------------------------------ views
    @property
    def metrics(self) -> MetricsCollector:
        """Where this spout reports (its own endpoint's with ``metrics_port`` and none given)."""
        return self._metrics

    @property
    def in_flight(self) -> int:
        return sum(sh.tracker.in_flight for sh in self.streams.partitions() if sh.tracker)

    @property
    def gone(self) -> Mapping[str, str]:
        """Streams no longer read (deleted, or created again), by name: why."""
        return MappingProxyType(self.streams.gone)

    def shard_states(self) -> dict[str, ShardState]:
        """The lifecycle state of every owned shard, by shard id (several streams:
        ``"<stream>/<shardId>"``)."""
        several = self.streams.several
        return {
            f"{sh.stream}/{sh.shard_id}" if several else sh.shard_id: sh.state
            for sh in sorted(self.streams.partitions(), key=lambda p: p.key)
        }

    @property
    def shards(self) -> Mapping[str, ShardInfo]:
        """Every shard known to this spout (owned or not), as :meth:`shard_states` keys."""
        several = self.streams.several
        return MappingProxyType(
            {
                f"{name}/{sid}" if several else sid: info
                for name, st in self.streams.sets.items()
                for sid, info in st.map.infos().items()
            }
        )

    def stats(self) -> SpoutStats:
        parts = self.streams.partitions()
        several = self.streams.several
        rr, acks, committer = self.rotation, self.acks, self._committer
        return spout_stats(parts, rr, acks, committer, self.clock(), several)

    @property
    def is_idle(self) -> bool:
        """Nothing in flight or buffered, and every owned shard caught up or ended."""
        return self._opened and all(sh.idle for sh in self.streams.partitions())

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._closed

    # ------------------------------------------------------------------ ownership
    def stream(self, name: str | None = None) -> StreamControl:
        """One stream's shards as a shard-lease coordinator steers them: ownership,
        draining, its own pause (None: the spout's one stream)."""
        self.check_open()
        st = self.streams.sets.get(name or self.config.stream_name)
        if st is None:
            raise KinesisSpoutError(f"stream {name!r} is not read by this spout")
        return StreamControl(st, self.checkpoint)

    def set_owned_shards(self, shard_ids: Iterable[str] | None) -> None:
        """Read only these shards of the spout's one stream (None: all); see
        :meth:`StreamControl.set_owned_shards`."""
        self.stream().set_owned_shards(shard_ids)

    def drain_shards(self, shard_ids: Iterable[str]) -> None:
        """Stop reading new records from these shards of the spout's one stream ahead of
        giving them up (their retries, acks and fails go on)."""
        self.stream().drain_shards(shard_ids)

    def in_flight_of(self, shard_ids: Iterable[str]) -> int:
        """Records handed out and not done on these shards of the spout's one stream."""
        return self.stream().in_flight_of(shard_ids)

    def check_open(self) -> None:
        """Raise unless the spout is open and not closed."""
        if not self._opened:
            raise KinesisSpoutError("KinesisSpout: call open() first")
        if self._closed:
            raise KinesisSpoutError("KinesisSpout: closed")


open_reader = KinesisSpout
"""The reader of a config, of one stream or several (an alias kept from earlier releases)."""
