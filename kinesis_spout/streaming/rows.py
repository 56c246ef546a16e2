"""The source's rows as Arrow batches (pyarrow only, no PySpark): :func:`arrow_schema`
matches the source's Spark schema exactly, :func:`to_arrow` converts one page of records."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING

from kinesis_spout.records import Record

if TYPE_CHECKING:
    import pyarrow as pa


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
