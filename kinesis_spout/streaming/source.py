"""``spark.readStream.format("kinesis")``: a Structured Streaming source in pure Python.

Built on PySpark's Python Data Source API (4.0+). Three kinds of process
take part, and they share nothing but pickles and offsets:

* the *offset process* (one Python worker for the query's lifetime) runs
  ``initialOffset``, ``latestOffset``, ``partitions`` and ``commit``: it lists
  shards, reads ahead to decide where each shard's batch ends
  (:func:`~kinesis_spout.streaming.shard_reader.read_ahead`) and writes the
  checkpoint store;
* the *executors* run ``read`` on a pickled copy of the reader and re-read
  exactly each planned shard range
  (:func:`~kinesis_spout.streaming.shard_reader.read_range`), as Arrow batches;
* the driver holds the offsets in Spark's checkpoint location.

So clients, pools and stores are created lazily and never pickled. See
``docs/streaming-source.md`` for options, guarantees and constraints.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from kinesis_spout.config import InitialPosition
from kinesis_spout.errors import (
    CheckpointError,
    ConfigError,
    KinesisSpoutError,
    StaleCheckpointError,
)
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.records import Checkpoint, Record, ShardInfo
from kinesis_spout.streaming.errors import DataLossError, MissingDependencyError, OffsetError
from kinesis_spout.streaming.offsets import (
    ShardPosition,
    ShardRange,
    SourceOffset,
    StartPosition,
    expired_ended,
    plan_ranges,
    ready_shards,
    split_quota,
    vanished,
)
from kinesis_spout.streaming.options import SourceOptions, parse_options
from kinesis_spout.streaming.shard_reader import ReadAhead, read_ahead, read_range

try:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.types import (
        BinaryType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )
except ImportError as _exc:  # pragma: no cover - depends on the installation
    raise MissingDependencyError(
        "the kinesis streaming source needs PySpark 4.0 or newer with its Python Data Source "
        f"API ({_exc}): pip install 'kinesis-spout[spark]'"
    ) from None

try:  # PySpark 4.2+: read limits and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - PySpark 4.0 / 4.1
    SupportsTriggerAvailableNow = None  # type: ignore[assignment,misc]
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

if TYPE_CHECKING:
    import pyarrow as pa

    from kinesis_spout.checkpoint.base import CheckpointStore

log = logging.getLogger(__name__)

MAX_READ_AHEAD_FAILURES = 20
"""Retriable errors in a row on one shard after which ``latestOffset`` gives up."""

NAME = "kinesis"
"""The format name: ``spark.readStream.format("kinesis")``."""

SCHEMA = StructType(
    [
        StructField("data", BinaryType()),
        StructField("streamName", StringType()),
        StructField("shardId", StringType()),
        StructField("sequenceNumber", StringType()),
        StructField("subSequenceNumber", LongType()),
        StructField("partitionKey", StringType()),
        StructField("approximateArrivalTimestamp", TimestampType()),
    ]
)
"""The rows' schema. ``approximateArrivalTimestamp`` is UTC; ``subSequenceNumber``
is the index inside a KPL aggregate (0 for a plain record)."""


def check_dependencies() -> None:
    """Raise :class:`MissingDependencyError` unless PySpark >= 4.0, pyarrow and
    pandas are importable (Spark moves Python data source rows as Arrow)."""
    import pyspark

    major = int(pyspark.__version__.split(".")[0])
    if major < 4:
        raise MissingDependencyError(
            f"the kinesis streaming source needs PySpark 4.0 or newer, found "
            f"{pyspark.__version__}: pip install 'kinesis-spout[spark]'"
        )
    for module in ("pyarrow", "pandas"):
        if importlib.util.find_spec(module) is None:
            raise MissingDependencyError(
                f"the kinesis streaming source needs {module} (PySpark moves the rows of "
                f"Python data sources as Arrow): pip install 'kinesis-spout[spark]'"
            )


@lru_cache(maxsize=1)
def arrow_schema() -> pa.Schema:
    """:data:`SCHEMA` as Arrow, exactly as PySpark checks it (timestamps in UTC)."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("data", pa.binary()),
            pa.field("streamName", pa.string()),
            pa.field("shardId", pa.string()),
            pa.field("sequenceNumber", pa.string()),
            pa.field("subSequenceNumber", pa.int64()),
            pa.field("partitionKey", pa.string()),
            pa.field("approximateArrivalTimestamp", pa.timestamp("us", tz="UTC")),
        ]
    )


def to_arrow(records: Sequence[Record]) -> pa.RecordBatch:
    """One Arrow batch of rows in :data:`SCHEMA` order."""
    import pyarrow as pa

    n = len(records)
    stream = records[0].stream_name if n else ""
    shard = records[0].shard_id if n else ""
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.data for r in records], pa.binary()),
            pa.array([stream] * n, pa.string()),
            pa.array([shard] * n, pa.string()),
            pa.array([r.sequence_number for r in records], pa.string()),
            pa.array([r.sub_sequence_number for r in records], pa.int64()),
            pa.array([r.partition_key for r in records], pa.string()),
            pa.array([_micros(r.approximate_arrival) for r in records], _TIMESTAMP_TYPE()),
        ],
        schema=arrow_schema(),
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _micros(t: datetime | None) -> int | None:
    """Microseconds since the epoch. botocore's datetimes carry dateutil's
    ``tzlocal``, whose offset lookups made Arrow's own conversion the most
    expensive step of a read; one subtraction asks for the offset once."""
    return None if t is None else (t - _EPOCH) // _MICROSECOND


@lru_cache(maxsize=1)
def _TIMESTAMP_TYPE() -> pa.DataType:  # noqa: N802 - a constant, built on first use
    import pyarrow as pa

    return pa.timestamp("us", tz="UTC")


@lru_cache(maxsize=8)
def _client(endpoint_url: str | None, region: str) -> Any:
    """One boto3 client per Python worker process (workers are reused across tasks)."""
    return make_client(endpoint_url, region)


class ShardRangePartition(InputPartition):
    """One Spark task: one shard's range of one batch. Picklable."""

    def __init__(self, rng: ShardRange) -> None:
        super().__init__(rng.shard_id)
        self.range = rng

    def __repr__(self) -> str:
        r = self.range
        return f"ShardRangePartition({r.shard_id}, after={r.after_key}, to={r.last_key})"


class KinesisDataSource(DataSource):
    """The ``kinesis`` Python data source (streaming reads only).

    Options are validated when the schema is asked for, i.e. at ``load()``.
    """

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        check_dependencies()
        parse_options(self.options)
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if schema != SCHEMA:
            raise ConfigError(
                "schema",
                schema.simpleString(),
                f"the kinesis source has a fixed schema: {SCHEMA.simpleString()}",
            )
        options = parse_options(self.options)
        if SupportsTriggerAvailableNow is not None:
            return KinesisStreamReaderAvailableNow(options)
        return KinesisStreamReader(options)  # pragma: no cover - PySpark 4.0 / 4.1


class KinesisStreamReader(DataSourceStreamReader):
    """The stream reader: offsets in the offset process, ``read`` on executors.

    Pickled for the executors without its runtime state (clients, pools,
    caches): only the options travel.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner: _Planner | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._planner = None

    @property
    def planner(self) -> _Planner:
        if self._planner is None:
            self._planner = _Planner(self.options)
        return self._planner

    # --- offset process -------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        return self.planner.initial_offset().to_json()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        """Where the next batch ends. PySpark 4.2+ passes ``start`` and a read
        limit; 4.0 passes neither, and the last planned offset is used."""
        total: int | None
        if limit is None:
            total = self.options.max_records_per_trigger
        elif ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            total = int(limit.max_rows)
        else:
            if ReadAllAvailable is None or not isinstance(limit, ReadAllAvailable):
                log.warning("read limit %r is not supported; reading all available", limit)
            total = None
        return self.planner.latest(start, total).to_json()

    def getDefaultReadLimit(self) -> Any:
        if ReadMaxRows is None:  # pragma: no cover - PySpark 4.0 / 4.1 never call this
            return None
        if self.options.max_records_per_trigger is not None:
            return ReadMaxRows(self.options.max_records_per_trigger)
        return ReadAllAvailable()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, last = self.planner.parse(start), self.planner.parse(end)
        self.planner.planned(last)
        ranges = plan_ranges(first, last)
        log.debug("batch %s: %d shard ranges", _describe(last), len(ranges))
        return [ShardRangePartition(r) for r in ranges]

    def commit(self, end: dict[str, Any]) -> None:
        self.planner.commit(self.planner.parse(end))

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None

    # --- executors ----------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ShardRangePartition):
            raise TypeError(f"not a kinesis partition: {partition!r}")
        opts = self.options
        api = KinesisApi(_client(opts.endpoint_url, opts.region), opts.stream_name)
        for page in read_range(
            api,
            partition.range,
            fetch=opts.max_records_per_fetch,
            fail_on_data_loss=opts.fail_on_data_loss,
        ):
            yield to_arrow(page)


if SupportsTriggerAvailableNow is not None:

    class KinesisStreamReaderAvailableNow(KinesisStreamReader, SupportsTriggerAvailableNow):
        """The reader on PySpark 4.2+: also supports ``trigger(availableNow=True)``."""

        def prepareForTriggerAvailableNow(self) -> None:
            """Read only what arrived before now: the read-ahead stops at records
            whose arrival time is later, and at each shard's tip."""
            self.planner.cutoff = datetime.now(UTC)
            log.info("availableNow: reading records that arrived up to %s", self.planner.cutoff)


def register(spark: Any) -> None:
    """Register the ``kinesis`` format on ``spark`` (a SparkSession)."""
    check_dependencies()
    spark.dataSource.register(KinesisDataSource)


def _describe(offset: SourceOffset) -> str:
    moving = sum(1 for p in offset.shards.values() if not p.ended)
    return f"{offset.stream_name} ({moving} shards open, {len(offset.shards) - moving} ended)"


@dataclass(frozen=True, slots=True)
class _Ahead:
    """One read-ahead over the shards: the new offset and whether it is final."""

    offset: SourceOffset
    full: bool
    """Every ready shard gave its whole quota."""
    finished: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class _ShardState:
    """The offset process's memory of one shard (pacing and a reusable iterator)."""

    iterator_after: ShardPosition | None = None
    iterator: str | None = None
    next_poll: float = 0.0
    """Monotonic time before which the shard is not read ahead again."""
    failures: int = 0
    caught_up: bool = False
    """availableNow: the shard reached its tip after the cutoff; nothing more to read."""


class _Planner:
    """State of the offset process: lazily built, never pickled."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.cutoff: datetime | None = None
        self._api: KinesisApi | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._prefetcher: ThreadPoolExecutor | None = None
        self._prefetch: tuple[SourceOffset, int | None, Future[_Ahead]] | None = None
        self._store: CheckpointStore | None = None
        self._initial: SourceOffset | None = None
        self._last_planned: SourceOffset | None = None
        self._listed: list[ShardInfo] = []
        self._listed_at = float("-inf")
        self._shards: dict[str, _ShardState] = {}
        self._committed: dict[str, tuple[str | None, int, bool]] = {}
        self._turn = 0

    @property
    def api(self) -> KinesisApi:
        if self._api is None:
            opts = self.options
            self._api = KinesisApi(make_client(opts.endpoint_url, opts.region), opts.stream_name)
        return self._api

    def parse(self, doc: Any) -> SourceOffset:
        offset = SourceOffset.from_json(doc)
        if offset.stream_name != self.options.stream_name:
            raise OffsetError(
                f"the checkpoint location holds offsets of stream {offset.stream_name!r}, "
                f"but streamName is {self.options.stream_name!r}: use a new checkpoint location"
            )
        return offset

    def planned(self, end: SourceOffset) -> None:
        """Remember the last planned offset: PySpark 4.0 calls ``latestOffset()``
        without a start (and ``partitions(x, x)`` after a restart)."""
        self._last_planned = end

    # --- initial and latest offsets -------------------------------------------------
    def initial_offset(self) -> SourceOffset:
        """The query's first start; LATEST is pinned to "now" (as AT_TIMESTAMP)
        once per process, so a replay of the first batch reads the same records."""
        if self._initial is None:
            opts = self.options
            self.api.check_stream()
            if opts.initial_position is InitialPosition.LATEST:
                # Kinesis arrival times have millisecond resolution: round down, so a
                # record put in the same millisecond is in, never out.
                now = datetime.now(UTC)
                now = now.replace(microsecond=now.microsecond // 1000 * 1000)
                start = StartPosition(InitialPosition.AT_TIMESTAMP, now)
            elif opts.initial_position is InitialPosition.AT_TIMESTAMP:
                start = StartPosition(InitialPosition.AT_TIMESTAMP, opts.initial_timestamp)
            else:
                start = StartPosition()
            self._initial = SourceOffset(opts.stream_name, start, {})
            log.info("kinesis source on %s starts at %s", opts.stream_name, start.to_json())
        return self._initial

    def list_shards(self) -> list[ShardInfo]:
        now = time.monotonic()
        if now - self._listed_at >= self.options.shard_list_interval:
            self._listed = self.api.list_shards()
            self._listed_at = now
        return self._listed

    def latest(self, start_doc: dict[str, Any] | None, total: int | None) -> SourceOffset:
        if start_doc is not None:
            start = self.parse(start_doc)
        else:
            start = self._last_planned or self.initial_offset()
        new = self._take_prefetch(start, total)
        if new is None:
            new = self._read_ahead(start, total).offset
        self._last_planned = new
        if new != start:
            self._start_prefetch(new, total)
        return new

    def _start_prefetch(self, start: SourceOffset, total: int | None) -> None:
        """Read ahead for the batch after ``start`` while Spark runs the batch
        that ends at ``start``: the next ``latestOffset`` is then mostly ready.
        Only one read-ahead runs at a time (they share the shards' iterators)."""
        if self._prefetcher is None:
            self._prefetcher = ThreadPoolExecutor(1, thread_name_prefix="kinesis-prefetch")
        self._prefetch = (start, total, self._prefetcher.submit(self._read_ahead, start, total))

    def _take_prefetch(self, start: SourceOffset, total: int | None) -> SourceOffset | None:
        """The prefetched offset if it was computed from ``start`` with ``total``;
        waits for it either way, so no two read-aheads overlap."""
        if self._prefetch is None:
            return None
        from_offset, from_total, future = self._prefetch
        self._prefetch = None
        try:
            ready = future.result()
        except Exception as exc:  # read again in the foreground, where it is raised
            log.info("prefetched read-ahead failed (%s); reading again", exc)
            return None
        if from_offset != start or from_total != total:
            return None
        # A prefetch that reached a shard's tip misses what arrived since: use it
        # only while fresh (or under availableNow, which ignores later records).
        age = time.monotonic() - ready.finished
        if ready.full or self.cutoff is not None or age <= self.options.idle_poll_interval:
            return ready.offset
        return None

    def _read_ahead(self, start: SourceOffset, total: int | None) -> _Ahead:
        opts = self.options
        listed = self.list_shards()
        drop = expired_ended(listed, start)
        gone = vanished(listed, start)
        if gone:
            msg = (
                f"shards {gone} of {opts.stream_name} disappeared from ListShards before "
                "they were read to their end: their remaining records expired"
            )
            if opts.fail_on_data_loss:
                raise DataLossError(msg + "; set failOnDataLoss=false to go on without them")
            log.warning("%s (failOnDataLoss=false: going on)", msg)
            drop += gone
        ready = ready_shards(listed, start)
        while True:
            now = time.monotonic()
            states = {s: self._shards.setdefault(s, _ShardState()) for s in ready}
            pollable = [s for s in ready if states[s].next_poll <= now and not states[s].caught_up]
            quotas = split_quota(pollable, opts.max_records_per_shard, total, self._turn)
            self._turn += 1
            results = self._run(start, quotas)
            positions = {r.shard_id: r.position for r in results if r.position is not None}
            waiting = [s for s in ready if states[s].failures and not states[s].caught_up]
            if positions or not waiting or self.cutoff is None:
                break
            # availableNow must not end while a throttled shard still has records
            # before the cutoff: wait for its backoff instead of reporting "no data".
            time.sleep(max(0.0, min(states[s].next_poll for s in waiting) - time.monotonic()))
        ended = [s for s, p in positions.items() if p.ended]
        if ended:
            self._listed_at = float("-inf")  # children are now due: list again next time
            log.info("shards ended in %s: %s", opts.stream_name, ", ".join(ended))
        # "Full": every ready shard gave its whole quota, so reading again later
        # could not have added anything to this batch.
        full = all((p := positions.get(s)) is not None and p.count == quotas.get(s) for s in ready)
        if not positions and not drop:
            return _Ahead(start, full)
        return _Ahead(start.updated(positions, drop), full)

    def _run(self, start: SourceOffset, quotas: dict[str, int]) -> list[ReadAhead]:
        if not quotas:
            return []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.options.read_ahead_threads, thread_name_prefix="kinesis-ahead"
            )
        futures = [
            self._pool.submit(self._read_shard, start, shard, quota)
            for shard, quota in quotas.items()
        ]
        return [f.result() for f in futures]

    def _read_shard(self, start: SourceOffset, shard: str, quota: int) -> ReadAhead:
        opts = self.options
        after = start.shards.get(shard)
        state = self._shards[shard]
        iterator = state.iterator if state.iterator_after == after else None
        result = read_ahead(
            self.api,
            shard,
            after,
            start.start,
            quota,
            fetch=opts.max_records_per_fetch,
            iterator=iterator,
            cutoff=self.cutoff,
        )
        state.iterator = result.next_iterator
        state.iterator_after = result.position or after
        now = time.monotonic()
        if result.error is not None:
            state.failures += 1
            if state.failures >= MAX_READ_AHEAD_FAILURES:
                raise result.error
            state.next_poll = now + min(10.0, 0.2 * 2 ** min(state.failures, 6))
        else:
            state.failures = 0
            state.next_poll = now + (opts.idle_poll_interval if result.idle else 0.0)
            state.caught_up = self.cutoff is not None and result.idle
        return result

    # --- commit ----------------------------------------------------------------------
    def commit(self, end: SourceOffset) -> None:
        """Mirror ``end`` into the checkpoint store. Never fails the query: the
        Spark checkpoint location is the source of truth, the store shows progress."""
        opts = self.options
        if opts.checkpoint_store is None:
            return
        try:
            store = self._open_store()
        except KinesisSpoutError as exc:
            log.warning("checkpoint store %s unavailable: %s", opts.checkpoint_store, exc)
            return
        for shard in sorted(end.shards):
            pos = end.shards[shard]
            mark = (pos.sequence, pos.sub_sequence, pos.ended)
            if self._committed.get(shard) == mark:
                continue
            try:
                if pos.sequence is None:
                    store.mark_ended(end.stream_name, shard, opts.owner)
                else:
                    store.save(
                        Checkpoint(
                            end.stream_name,
                            shard,
                            pos.sequence,
                            pos.sub_sequence,
                            shard_end=pos.ended,
                            job_name=opts.job_name,
                            owner=opts.owner,
                        )
                    )
            except StaleCheckpointError as exc:
                log.info("checkpoint of %s not moved: %s", shard, exc)
            except CheckpointError as exc:
                log.warning("checkpoint of %s not written (next commit retries): %s", shard, exc)
                continue
            self._committed[shard] = mark

    def _open_store(self) -> CheckpointStore:
        if self._store is None:
            from kinesis_spout.checkpoint.base import open_store

            opts = self.options
            assert opts.checkpoint_store is not None
            self._store = open_store(
                opts.checkpoint_store, opts.job_name, owner=opts.owner, zk_auth=opts.zk_auth
            )
        return self._store

    def close(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.shutdown(wait=True, cancel_futures=True)
            self._prefetcher = None
            self._prefetch = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._store is not None:
            try:
                self._store.close()
            except KinesisSpoutError as exc:
                log.warning("closing the checkpoint store: %s", exc)
            self._store = None
