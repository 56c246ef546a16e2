"""Several streams in one reader: :class:`MultiStreamSpout`, Storm's spout contract over
every shard of every stream in ``config.streams``.

It holds one :class:`~kinesis_spout.spout.KinesisSpout` per stream, built from that
stream's own config (:meth:`~kinesis_spout.config.SpoutConfig.per_stream`: its
``initial_position`` and ``consumer`` overrides), and shares between them what one job
has once: the job lease, the checkpoint store, the dead-letter sink, the Kinesis client
and the metrics registry (each stream's series labelled with its name). Each stream keeps
its own shards, trackers, replay bound and checkpoints, keyed by its name exactly as a
single-stream job keys them.

* **Fair.** ``next_batch(n)`` offers each stream an equal share of ``n`` first, starting
  with a different stream each call, and only then gives what is left to streams that
  filled their share: a stream of 1 shard is read as often as one of 64.
* **Message ids** name the stream: ``"<stream>/<shardId>:<sequence>[:<sub>]"``
  (:meth:`message_id`). ``ack`` and ``fail`` take those, or the :class:`Record`; a bare
  ``"<shardId>:..."`` id names no stream and is an error.
* **A deleted stream** stops being read: a WARNING, the ``streams_gone`` metric, nothing
  saved (its positions belong to no stream now); the other streams go on. So does a
  stream found recreated under its name (another creation time): it is another stream,
  and this reader's checkpoints are the old one's.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kinesis_spout.checkpoint.base import CheckpointStore
from kinesis_spout.checkpoint.factory import open_config_store
from kinesis_spout.config import SpoutConfig
from kinesis_spout.core.acks import MessageRef
from kinesis_spout.core.readerlease import ReaderLease, reader_label
from kinesis_spout.core.stats import SpoutStats, combined_stats
from kinesis_spout.deadletter import DeadLetterSink
from kinesis_spout.deadletter.open import open_config_sink
from kinesis_spout.errors import KinesisSpoutError, StreamNotFoundError, StreamRecreatedError
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.metrics import MetricsCollector, NoopMetrics
from kinesis_spout.observability.endpoint import MetricsEndpoint
from kinesis_spout.records import Record, ShardState
from kinesis_spout.spout import KinesisSpout

log = logging.getLogger(__name__)

STREAMS_GONE = "streams_gone"
"""Counter: streams that stopped being read because they were deleted or recreated."""


def open_reader(config: SpoutConfig, **kwargs: Any) -> KinesisSpout | MultiStreamSpout:
    """The reader of ``config``: a :class:`KinesisSpout` for one stream, a
    :class:`MultiStreamSpout` for several (not opened)."""
    if len(config.stream_names) > 1:
        return MultiStreamSpout(config, **kwargs)
    return KinesisSpout(config, **kwargs)


class MultiStreamSpout:
    """Reads every shard of every stream of ``config.streams`` (see the module docstring).

    Not thread-safe, like :class:`KinesisSpout`; the same keyword arguments, with the
    same ownership: ``store``, ``dead_letters``, ``client`` and ``metrics`` given stay the
    caller's.
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
        self._store, self._own_store = store, store is None
        self._dead, self._own_dead = dead_letters, dead_letters is None
        self._endpoint = MetricsEndpoint.of(config) if metrics is None else None
        if metrics is None:
            metrics = self._endpoint.metrics if self._endpoint is not None else NoopMetrics()
        self.metrics: MetricsCollector = metrics
        self._client = client
        self._spout_args: dict[str, Any] = {"clock": clock, "rng": rng, "sleep": sleep}
        self._reader = reader
        self._subscribe = subscribe
        self.spouts: dict[str, KinesisSpout] = {}
        """The streams still read, by name, in the config's order."""
        self.gone: dict[str, str] = {}
        """Streams no longer read, by name: why."""
        self._final: dict[str, SpoutStats] = {}
        """The last counters of the streams no longer read."""
        self._turn = 0
        self._opened = self._closed = False

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Take the job lease, open the shared parts, then each stream (an unknown stream
        is an error naming it, and leaves nothing open)."""
        if self._opened:
            return
        cfg = self.config
        if self._endpoint is not None:
            self._endpoint.start()
        try:
            self._lease.take()
            if self._client is None:
                self._client = make_client(
                    cfg.endpoint_url, cfg.region, profile=cfg.profile, role=cfg.assumed_role
                )
            if self._store is None:
                self._store = open_config_store(cfg)
            if self._dead is None:
                self._dead = open_config_sink(cfg)
            for one in cfg.per_stream():
                spout = self._spout(one)
                self.spouts[one.stream_name] = spout
                spout.open()
        except BaseException:
            self._close_all()
            raise
        self._opened = True
        log.info("opened %d streams: %s", len(self.spouts), ", ".join(self.spouts))

    def _spout(self, one: SpoutConfig) -> KinesisSpout:
        labelled = getattr(self.metrics, "for_stream", None)
        return KinesisSpout(
            one,
            store=self._store,
            dead_letters=self._dead,
            metrics=labelled(one.stream_name) if labelled is not None else self.metrics,
            client=self._client,
            job_lease=False,
            subscribe=self._subscribe,
            reader=self._reader,
            **self._spout_args,
        )

    def close(self) -> None:
        """Close every stream (final checkpoints), then the shared parts."""
        if self._closed:
            return
        self._closed = True
        self._close_all()

    def _close_all(self) -> None:
        try:
            for spout in self.spouts.values():
                try:
                    spout.close()
                except Exception:
                    log.exception("closing stream %s failed", spout.config.stream_name)
        finally:
            if self._own_store and self._store is not None:
                self._store.close()
                self._store = None
            if self._own_dead and self._dead is not None:
                self._dead.close()
                self._dead = None
            if self._endpoint is not None:
                self._endpoint.close()
            self._lease.release()

    def __enter__(self) -> MultiStreamSpout:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def activate(self) -> None:
        for spout in self.spouts.values():
            spout.activate()

    def deactivate(self) -> None:
        for spout in self.spouts.values():
            spout.deactivate()

    # ------------------------------------------------------------------ emitting
    def next_tuple(self) -> Record | None:
        batch = self.next_batch(1)
        return batch[0] if batch else None

    def next_batch(self, max_records: int) -> list[Record]:
        """Up to ``max_records`` records over the streams, an equal share offered to each
        first (see the module docstring). Never blocks."""
        self._check_open()
        self._lease.check()
        order = self._rotated()
        if max_records <= 0:
            for spout in order:
                self._take(spout, 0)  # housekeeping only
            return []
        share = max(1, max_records // max(1, len(order)))
        out: list[Record] = []
        full: list[KinesisSpout] = []
        for spout in order:
            want = min(share, max_records - len(out))
            got = self._take(spout, want)
            out.extend(got)
            if want and len(got) == want:
                full.append(spout)
        for spout in full:
            if len(out) >= max_records:
                break
            out.extend(self._take(spout, max_records - len(out)))
        return out

    def _rotated(self) -> list[KinesisSpout]:
        spouts = list(self.spouts.values())
        if not spouts:
            return []
        k = self._turn % len(spouts)
        self._turn += 1
        return spouts[k:] + spouts[:k]

    def _take(self, spout: KinesisSpout, n: int) -> list[Record]:
        """``spout.next_batch(n)``; a stream found deleted or created again is let go (an
        other error is checked against the stream's identity first: a gone stream can
        answer with another error)."""
        try:
            return spout.next_batch(n)
        except StreamNotFoundError as exc:
            self.let_go(spout, _gone(exc))
        except KinesisSpoutError:
            if spout.api is None:
                raise
            try:
                spout.api.check_identity()
            except StreamNotFoundError as exc:
                self.let_go(spout, _gone(exc))
                return []
            raise
        return []

    def let_go(self, spout: KinesisSpout, why: str) -> None:
        """Stop reading ``spout``'s stream (deleted or created again: ``why``); the others
        go on. Also called by a reader elsewhere that found it gone (the Spark driver)."""
        name = spout.config.stream_name
        log.warning("stream %s %s: it is no longer read; the other streams go on", name, why)
        spout.metrics.increment(STREAMS_GONE)  # labelled with its stream
        self.spouts.pop(name, None)
        self.gone[name] = why
        try:
            spout.drop()  # no checkpoint saved: it could land on a new stream of the name
        except Exception:
            log.exception("closing stream %s failed", name)
        self._final[name] = spout.stats()

    def poll_delay(self) -> float:
        """Seconds until some stream may have something (0: call ``next_batch`` now)."""
        self._check_open()
        return min((s.poll_delay() for s in self.spouts.values()), default=1.0)

    # ------------------------------------------------------------------ acks and fails
    @staticmethod
    def message_id(record: Record) -> str:
        """``"<stream>/<shardId>:<sequence>[:<sub>]"``: a record's id across streams."""
        return f"{record.stream_name}/{record.message_id}"

    def _route(self, ref: MessageRef) -> tuple[KinesisSpout | None, MessageRef]:
        if isinstance(ref, Record):
            return self.spouts.get(ref.stream_name), ref
        stream, sep, inner = ref.partition("/")
        if not sep:
            raise KinesisSpoutError(
                f"message id {ref!r} names no stream: with several streams, ack and fail "
                "the Record, or MultiStreamSpout.message_id(record) ('<stream>/<id>')"
            )
        return self.spouts.get(stream), inner

    def ack(self, message_id: MessageRef) -> None:
        """The record is done (a stream no longer read ignores it)."""
        spout, ref = self._route(message_id)
        if spout is not None:
            spout.ack(ref)

    def ack_many(self, ids: Iterable[MessageRef]) -> None:
        for ref in ids:
            self.ack(ref)

    def fail(self, message_id: MessageRef, error: str | None = None) -> None:
        """The record failed: retried later, or dead-lettered once out of retries."""
        spout, ref = self._route(message_id)
        if spout is not None:
            spout.fail(ref, error)

    def fail_many(self, items: Iterable[tuple[MessageRef, str | None]]) -> None:
        for ref, error in items:
            self.fail(ref, error)

    def checkpoint(self, force: bool = False) -> None:
        """Save each stream's checkpoints that moved, if due (or ``force``)."""
        for spout in list(self.spouts.values()):
            spout.checkpoint(force)

    # ------------------------------------------------------------------ views
    @property
    def in_flight(self) -> int:
        return sum(s.in_flight for s in self.spouts.values())

    @property
    def is_idle(self) -> bool:
        """Every stream still read is idle."""
        return self._opened and all(s.is_idle for s in self.spouts.values())

    def stats(self) -> SpoutStats:
        """The counters of every stream still read, summed (``millis_behind_latest`` keyed
        ``"<stream>/<shardId>"``; ``checkpoint_age`` the oldest)."""
        return combined_stats(self.stream_stats(), self._final.values())

    def stream_stats(self) -> Mapping[str, SpoutStats]:
        """Each stream's counters, by name."""
        return {name: s.stats() for name, s in self.spouts.items()}

    def shard_states(self) -> dict[str, ShardState]:
        """Each owned shard's state, keyed ``"<stream>/<shardId>"``."""
        return {
            f"{name}/{shard}": state
            for name, s in self.spouts.items()
            for shard, state in s.shard_states().items()
        }

    def _check_open(self) -> None:
        if not self._opened:
            raise KinesisSpoutError("MultiStreamSpout: call open() first")
        if self._closed:
            raise KinesisSpoutError("MultiStreamSpout: closed")


def _gone(exc: StreamNotFoundError) -> str:
    """Why a stream is no longer read, as the WARNING and ``gone`` say it."""
    return str(exc) if isinstance(exc, StreamRecreatedError) else f"deleted ({exc})"
