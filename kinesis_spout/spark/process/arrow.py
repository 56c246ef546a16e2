"""Records to Arrow and statuses back: the two ends of a micro-batch.

The driver turns the spout's records into one Arrow table (:data:`INPUT_SCHEMA`)
that Spark reads without per-row Python work, and reads back one small status
per record (:data:`STATUS_SCHEMA`: the row index, ok, the error text) with
``toArrow()``. Without a row sink only the statuses travel back, never the
payloads; with a row sink (``sink = parquet://...`` or ``console``) the rows a
transform produced for the records that succeeded come back too, because the
sink writes them on the driver before the records are acked.

The ``_row`` column is the record's index in the micro-batch; it is how a status
finds its record again, so transforms must keep it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

ROW = "_row"
"""Index of the record in its micro-batch (int64)."""
ROOT = "_root"
"""Fan-out only: the record's acker root id (int64, the bits of a random 64-bit id)."""

ARRIVAL = "approximateArrivalTimestamp"
"""The arrival time's column (:func:`arrival_times` reads it back as datetimes)."""

DATA_COLUMNS: tuple[str, ...] = (
    "stream",
    "shardId",
    "sequenceNumber",
    "subSequenceNumber",
    "partitionKey",
    "data",
    ARRIVAL,
    "attempt",
)
"""The user-visible columns, in order (the names the Kinesis API uses)."""

INPUT_SCHEMA = pa.schema(
    [
        pa.field("stream", pa.string(), nullable=False),
        pa.field("shardId", pa.string(), nullable=False),
        pa.field("sequenceNumber", pa.string(), nullable=False),
        pa.field("subSequenceNumber", pa.int64(), nullable=False),
        pa.field("partitionKey", pa.string(), nullable=False),
        pa.field("data", pa.binary(), nullable=False),
        pa.field(ARRIVAL, pa.timestamp("us", tz="UTC")),
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field(ROW, pa.int64(), nullable=False),
    ]
)
"""Schema of the table handed to Spark (``_root`` is appended in fan-out mode)."""

STATUS_SCHEMA = pa.schema(
    [
        pa.field(ROW, pa.int64(), nullable=False),
        pa.field("ok", pa.bool_(), nullable=False),
        pa.field("error", pa.string()),
    ]
)
"""What comes back per record: index, ok, error text (null when ok)."""

STATUS_DDL = "_row long, ok boolean, error string"

RECORD_STATUS_SCHEMA = pa.schema([*STATUS_SCHEMA, pa.field("attempt", pa.int32(), nullable=False)])
"""The per-record style's statuses: also each record's last delivery (fast retries)."""
RECORD_STATUS_DDL = STATUS_DDL + ", attempt int"

MAX_ERROR_CHARS = 2000
"""Error texts are cut to this length (they go into dead-letter entries and logs)."""

MISSING_STATUS = "no status came back for this record"


class RecordLike(Protocol):
    """What :func:`records_to_arrow` reads: :class:`kinesis_spout.records.Record` fits."""

    @property
    def stream_name(self) -> str: ...
    @property
    def shard_id(self) -> str: ...
    @property
    def sequence_number(self) -> str: ...
    @property
    def sub_sequence_number(self) -> int: ...
    @property
    def partition_key(self) -> str: ...
    @property
    def data(self) -> bytes: ...
    @property
    def approximate_arrival(self) -> datetime | None: ...
    @property
    def attempt(self) -> int: ...


def input_schema(with_root: bool = False) -> pa.Schema:
    """:data:`INPUT_SCHEMA`, plus ``_root`` for fan-out batches."""
    if with_root:
        return INPUT_SCHEMA.append(pa.field(ROOT, pa.int64(), nullable=False))
    return INPUT_SCHEMA


def records_to_arrow(records: Sequence[RecordLike], roots: Sequence[int] | None = None) -> pa.Table:
    """One Arrow table with a row per record, in order; ``_row`` = 0..n-1.

    ``roots`` (fan-out) are signed 64-bit root ids, one per record.
    """
    n = len(records)
    if roots is not None and len(roots) != n:
        raise ValueError(f"roots has {len(roots)} ids for {n} records")
    arrays: list[pa.Array] = [
        pa.array([r.stream_name for r in records], pa.string()),
        pa.array([r.shard_id for r in records], pa.string()),
        pa.array([r.sequence_number for r in records], pa.string()),
        pa.array([r.sub_sequence_number for r in records], pa.int64()),
        pa.array([r.partition_key for r in records], pa.string()),
        pa.array([r.data for r in records], pa.binary()),
        pa.array([r.approximate_arrival for r in records], pa.timestamp("us", tz="UTC")),
        pa.array([r.attempt for r in records], pa.int32()),
        pa.array(np.arange(n, dtype=np.int64)),
    ]
    if roots is not None:
        arrays.append(pa.array(roots, pa.int64()))
    return pa.Table.from_arrays(arrays, schema=input_schema(roots is not None))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def arrival_times(column: pa.Array | pa.ChunkedArray) -> list[datetime | None]:
    """A timestamp column as aware UTC datetimes (None where null), as every
    :class:`~kinesis_spout.records.Record` has them.

    The instants ``column.to_pylist()`` gives, without its cost (it goes through the
    time zone database for every value): the microseconds since the epoch are added to
    a UTC epoch, and a value equal to the one before it (records of one put) is the same
    object. A unit other than microseconds is cast to them first (cut to the
    microsecond, as Kinesis's milliseconds always are)."""
    if not pa.types.is_timestamp(column.type):
        raise TypeError(f"arrival times: expected a timestamp column, not {column.type}")
    if column.type.unit != "us":
        column = column.cast(pa.timestamp("us", tz=column.type.tz), safe=False)
    out: list[datetime | None] = []
    append = out.append
    last: int | None = None
    value: datetime | None = None
    for micros in column.cast(pa.int64()).to_pylist():
        if micros != last:
            value = None if micros is None else _EPOCH + timedelta(microseconds=micros)
            last = micros
        append(value)
    return out


def format_error(exc: BaseException) -> str:
    """``"<Type>: <message>"``, cut to :data:`MAX_ERROR_CHARS`."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return clip_error(text)


def clip_error(text: str) -> str:
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return text[: MAX_ERROR_CHARS - 15] + "... (truncated)"


def sink_error(text: object) -> str:
    """A fan-out sink's error for one derived record, as it reports it (None: none given)."""
    return clip_error(str(text)) if text is not None else "sink reported a failure"


@dataclass(slots=True)
class Statuses:
    """Per-record results of rows ``start..stop-1`` of a micro-batch.

    A record is ok only if every status row that came back for it is ok and at
    least one came back: a record the processing lost is failed, never acked.
    """

    start: int
    stop: int
    ok: np.ndarray[Any, np.dtype[np.bool_]]
    """``ok[i - start]`` for row ``i``."""
    errors: dict[int, str] = field(default_factory=dict)
    """Error text by row index, for the failed rows."""
    attempts: dict[int, int] = field(default_factory=dict)
    """Last delivery number by row index, for the rows the processing ran more than
    once (fast retries); the others had the delivery they were sent with."""

    @property
    def ok_rows(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        return np.flatnonzero(self.ok).astype(np.int64) + self.start

    @property
    def failed_rows(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        return np.flatnonzero(~self.ok).astype(np.int64) + self.start

    @property
    def ok_count(self) -> int:
        return int(self.ok.sum())

    @property
    def failed_count(self) -> int:
        return len(self.ok) - self.ok_count

    def merged(self, other: Statuses) -> Statuses:
        """The statuses of two adjacent ranges as one (``self`` first)."""
        if other.start != self.stop:
            raise ValueError(f"ranges not adjacent: {self.start}..{self.stop}, {other.start}..")
        return Statuses(
            self.start,
            other.stop,
            np.concatenate([self.ok, other.ok]),
            {**self.errors, **other.errors},
            {**self.attempts, **other.attempts},
        )


def statuses_from_arrow(
    table: pa.Table,
    start: int,
    stop: int,
    *,
    missing_error: str = MISSING_STATUS,
) -> Statuses:
    """Fold status rows (``_row``, ``ok``, ``error``) into one status per record.

    Several rows for one record (a transform that exploded it) are combined:
    ok only if all are ok; the first error wins. A null ``ok`` is a failure.
    Rows outside ``start..stop-1`` are a bug in the processing: ValueError.
    """
    n = stop - start
    rows = table.column(ROW).to_numpy(zero_copy_only=False)
    if len(rows) and (rows.min() < start or rows.max() >= stop):
        bad = rows[(rows < start) | (rows >= stop)][0]
        raise ValueError(f"status for row {bad} outside the batch rows {start}..{stop - 1}")
    oks = table.column("ok").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    local = rows - start
    seen = np.zeros(n, dtype=bool)
    seen[local] = True
    bad_mask = np.zeros(n, dtype=bool)
    failed_local = local[~oks]
    bad_mask[failed_local] = True
    ok = seen & ~bad_mask
    errors: dict[int, str] = {}
    if len(failed_local):
        err_col = table.column("error") if "error" in table.column_names else None
        failed_idx = np.flatnonzero(~oks)
        texts = err_col.take(pa.array(failed_idx)).to_pylist() if err_col is not None else []
        for j, i in enumerate(failed_idx.tolist()):
            row = int(rows[i])
            if row not in errors:
                text = texts[j] if texts and texts[j] is not None else "processing failed"
                errors[row] = clip_error(str(text))
    for i in np.flatnonzero(~seen).tolist():
        errors[start + i] = missing_error
    attempts: dict[int, int] = {}
    if "attempt" in table.column_names:
        att = table.column("attempt").fill_null(1).to_numpy(zero_copy_only=False)
        for i in np.flatnonzero(att > 1).tolist():
            attempts[int(rows[i])] = int(att[i])
    return Statuses(start, stop, ok, errors, attempts)
