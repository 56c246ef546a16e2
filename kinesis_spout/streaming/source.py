"""``spark.readStream.format("kinesis")``: a Structured Streaming source in pure Python.

Built on PySpark's Python Data Source API (4.0+); each record is read once, on the
executors. The *offset process* (one Python worker for the query's lifetime) lists shards
and plans each batch from where the last one's tasks stopped
(:class:`~kinesis_spout.streaming.planner.Planner`); the *executors* read one shard of
one stream per task and record where they stopped (first writer wins, so a retried task
returns the same range: :mod:`~kinesis_spout.streaming.executor_read`); the driver holds
the offsets in Spark's checkpoint location. So clients and stores are created lazily and
never pickled. This module holds the PySpark side (data source, stream reader,
partitions); options, guarantees and constraints: docs/streaming-source.md.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from kinesis_spout.checkpoint.batch_ends import BatchEndStore
from kinesis_spout.checkpoint.factory import open_batch_ends
from kinesis_spout.errors import ConfigError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.client import process_client
from kinesis_spout.streaming.batch_offset import BatchOffset, StreamsOffset
from kinesis_spout.streaming.errors import MissingDependencyError, spark_too_old
from kinesis_spout.streaming.executor_read import read_batch_shard
from kinesis_spout.streaming.options import SourceOptions, parse_options
from kinesis_spout.streaming.planner import Planner, ShardRead
from kinesis_spout.streaming.rows import arrow_schema, to_arrow

try:
    import pyspark as _pyspark

    if int(_pyspark.__version__.split(".")[0]) < 4:
        raise spark_too_old(_pyspark.__version__)
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
        f"API ({_exc}): install kinesis-spout's spark extra with pyspark>=4.0"
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


log = logging.getLogger(__name__)

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

    if int(pyspark.__version__.split(".")[0]) < 4:
        raise spark_too_old(pyspark.__version__)
    for module in ("pyarrow", "pandas"):
        if importlib.util.find_spec(module) is None:
            raise MissingDependencyError(
                f"the kinesis streaming source needs {module} (PySpark moves the rows of "
                f"Python data sources as Arrow): install the kinesis-spout[spark] extra"
            )


@lru_cache(maxsize=64)
def _batch_ends(url: str, job: str, stream: str, zk_auth: str | None, region: str) -> BatchEndStore:
    """One batch-end store per stream and Python worker process (a query reading more
    streams than this cache holds reopens a store when its stream's turn comes)."""
    return open_batch_ends(url, job, stream, zk_auth, region=region)


@dataclass(frozen=True, repr=False)
class BatchShardPartition(ShardRead, InputPartition):
    """One Spark task: one shard of one stream in one batch (:class:`ShardRead`). Picklable."""

    def __repr__(self) -> str:
        pos = self.plan.position
        after = pos.key if pos is not None else self.start.kind.value
        return f"BatchShardPartition({self.batch}, {self.stream}/{self.shard_id}, after={after})"


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
        self._planner: Planner | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._planner = None

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options)
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
        first = self.planner.parse(start)  # another stream's or job's offset is an error
        last = self.planner.parse(end)
        self.planner.planned(last)
        if first.batch == last.batch:
            return []  # no batch between them (PySpark 4.0 asks after a restart)
        return self.planner.reads(first, last, BatchShardPartition)

    def commit(self, end: dict[str, Any]) -> None:
        self.planner.commit(self.planner.parse(end))

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None

    # --- executors ----------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, BatchShardPartition):
            raise TypeError(f"not a kinesis partition: {partition!r}")
        opts = self.options
        assert opts.checkpoint_store is not None
        p = partition
        api = KinesisApi(process_client(opts.endpoint_url, opts.region), p.stream, p.arn)
        store = _batch_ends(
            opts.checkpoint_store, opts.job_name, p.stream, opts.zk_auth, opts.region
        )
        for page in read_batch_shard(
            api,
            store,
            p.batch,
            p.shard_id,
            p.plan,
            p.start,
            run=p.run,
            fetch=opts.max_records_per_fetch,
            cutoff=p.cutoff,
            fail_on_data_loss=opts.fail_on_data_loss,
            efo=p.efo,
            closed=p.closed,
            iterator=p.iterator,
        ):
            yield to_arrow(page)


if SupportsTriggerAvailableNow is not None:

    class KinesisStreamReaderAvailableNow(KinesisStreamReader, SupportsTriggerAvailableNow):
        """The reader on PySpark 4.2+: also supports ``trigger(availableNow=True)``."""

        def prepareForTriggerAvailableNow(self) -> None:
            """Read only what arrived before now: the tasks stop at records whose
            arrival time is later, and the query ends once every shard got there."""
            self.planner.cutoff = datetime.now(UTC)
            log.info("availableNow: reading records that arrived up to %s", self.planner.cutoff)


def register(spark: Any) -> None:
    """Register the ``kinesis`` format on ``spark`` (a SparkSession)."""
    check_dependencies()
    spark.dataSource.register(KinesisDataSource)


__all__ = [
    "NAME",
    "SCHEMA",
    "KinesisDataSource",
    "KinesisStreamReader",
    "BatchOffset",
    "BatchShardPartition",
    "StreamsOffset",
    "arrow_schema",
    "check_dependencies",
    "register",
    "to_arrow",
]
