"""Sinks for the processed rows: ``none``, ``console``, ``parquet://DIR``.

The executors write a micro-batch's ok rows before its statuses reach the driver, and
the checkpoint moves only after the ack: every acked record is in the sink, and rows
may be written again after a crash (at-least-once). Parquet files appear whole, through
a hidden temporary name and a rename. What the rows are per processing style, and how
readers deduplicate: docs/spark-job.md ("Output and delivery semantics").
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq

from kinesis_spout.errors import ConfigError

log = logging.getLogger(__name__)


class NullSink:
    """``sink = "none"``: the user's function writes its own output."""

    name = "none"

    def write(self, batch_id: int, table: pa.Table) -> None:
        return None

    def close(self) -> None:
        return None


class ConsoleSink:
    """``sink = "console"``: a row count and the first rows of every batch."""

    name = "console"

    def __init__(self, out: IO[str] | None = None, max_rows: int = 10) -> None:
        self.out = out or sys.stdout
        self.max_rows = max_rows

    def write(self, batch_id: int, table: pa.Table) -> None:
        head = table.slice(0, self.max_rows)
        lines = [f"-- batch {batch_id}: {table.num_rows} rows"]
        names = head.column_names
        cols = [head.column(n).to_pylist() for n in names]
        for values in zip(*cols, strict=True):
            lines.append(
                "   " + " | ".join(f"{n}={_short(v)}" for n, v in zip(names, values, strict=True))
            )
        if table.num_rows > self.max_rows:
            lines.append(f"   ... {table.num_rows - self.max_rows} more")
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()

    def close(self) -> None:
        return None


def _short(v: object, limit: int = 60) -> str:
    if isinstance(v, bytes):
        try:
            text = repr(v.decode("utf-8"))
        except UnicodeDecodeError:
            text = f"<{len(v)} bytes>"
    else:
        text = repr(v) if isinstance(v, str) else str(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ParquetSink:
    """``sink = "parquet://DIR"``: one Parquet file per non-empty batch, renamed into place."""

    name = "parquet"

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.files_written = 0

    def write(self, batch_id: int, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        final = write_parquet_file(table, self.directory, f"part-{batch_id:08d}")
        self.files_written += 1
        log.debug("wrote %d rows to %s", table.num_rows, final)

    def close(self) -> None:
        return None


def write_parquet_file(table: pa.Table, directory: str | Path, stem: str) -> Path:
    """Write ``<directory>/<stem>-<random>.parquet`` durably and atomically
    (hidden temporary name, fsync, rename); return its path."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{stem}-{uuid.uuid4().hex[:12]}.parquet"
    tmp = folder / f".tmp-{final.name}"
    pq.write_table(table, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    return final


def open_sink(target: str) -> NullSink | ConsoleSink | ParquetSink:
    """The sink named by the ``sink`` config value."""
    if target == "none":
        return NullSink()
    if target == "console":
        return ConsoleSink()
    if target.startswith("parquet://"):
        path = target[len("parquet://") :]
        if not path:
            raise ConfigError("sink", target, "parquet://DIR with a directory")
        return ParquetSink(path)
    raise ConfigError("sink", target, "none, console or parquet://DIR")


def read_parquet_dir(directory: str | Path) -> pa.Table | None:
    """Every row a :class:`ParquetSink` wrote (``None`` if nothing yet)."""
    files = sorted(p for p in Path(directory).glob("part-*.parquet"))
    if not files:
        return None
    return pa.concat_tables([pq.read_table(p) for p in files], promote_options="default")


# --- written by the executors --------------------------------------------------


def write_task_rows(target: str, batch_id: int, tables: list[pa.Table]) -> int:
    """Write the rows of one task (on an executor) to the sink ``target``; how many rows."""
    rows = int(sum(t.num_rows for t in tables))
    if not rows:
        return 0
    sink = open_sink(target)
    try:
        sink.write(batch_id, pa.concat_tables(tables))
    finally:
        sink.close()
    return rows


def ok_rows_writer(
    target: str, batch_id: int, columns: list[str]
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function over ``_row, ok, error, *columns``: writes the
    ``columns`` of the ok rows of its task to the sink, **then** yields the
    statuses (``_row, ok, error``): no status leaves a task before its rows are written."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        statuses: list[pa.RecordBatch] = []
        rows: list[pa.Table] = []
        for b in batches:
            ok = pa.compute.fill_null(b.column("ok"), False)
            rows.append(pa.Table.from_batches([b.filter(ok)]).select(columns))
            statuses.append(b.select(["_row", "ok", "error"]))
        write_task_rows(target, batch_id, rows)
        yield from statuses

    return run


def rows_writer(
    target: str, batch_id: int
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function writing every row of its task to the sink; yields the
    count (one ``written long`` row)."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        n = write_task_rows(target, batch_id, [pa.Table.from_batches([b]) for b in batches])
        yield pa.RecordBatch.from_arrays([pa.array([n], pa.int64())], names=["written"])

    return run
