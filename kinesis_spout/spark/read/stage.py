"""What a read task of the DataFrame styles returns: its records, its plans' ends and,
for a fan-out, what ``emit`` made of the records.

Rows of :data:`FRAME_SCHEMA`: a row per record read (``_row``: its plan's base plus its
index in the read), then a row per plan with its pickled result (:data:`META`), sent as
each read ends so the JVM works on one shard while the next is read. For a fan-out the
task runs ``emit`` on the records it holds (:class:`ReadEmitter`): each record crosses to
the JVM once, with its emit status and derived records in the same row. A partition
computed again reads the same recorded ranges, hence the same rows, roots and ids. With
a reporter, a fan-out's task also reports its emit rows and ends once Spark took all its
rows (:mod:`~kinesis_spout.spark.read.emit_reports`).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from kinesis_spout.records import Record
from kinesis_spout.spark.plan import ReadPlan, ReadSettings
from kinesis_spout.spark.process.arrow import INPUT_SCHEMA, ROW, records_to_arrow
from kinesis_spout.spark.process.fanout import emit_records, stage_schema
from kinesis_spout.spark.process.styles import EmitFunction
from kinesis_spout.spark.read.emit_reports import Reporter, TaskReport
from kinesis_spout.spark.read.recorded import KeptRead, RecordTo, read_recorded
from kinesis_spout.spark.worker_heap import freeze_imports

PLAN = "_plan"
"""The task number of the plan a row was read for."""
META = "_meta"
"""A plan's pickled :class:`ReadResult` (one row per plan, its other columns null)."""

FRAME_SCHEMA = pa.schema(
    [pa.field(f.name, f.type, nullable=True) for f in INPUT_SCHEMA]
    + [pa.field(PLAN, pa.int64()), pa.field(META, pa.binary())]
)
"""The read stage's rows: a record (``_row`` its plan's base plus its index in the plan's
read, :class:`~kinesis_spout.spark.read.rows.RowSpace`) or a plan's end."""


def stage_batches(
    kept: Iterable[KeptRead],
    tasks: list[ReadPlan],
    bases: dict[int, int],
    emitter: ReadEmitter | None = None,
    report: TaskReport | None = None,
) -> Iterator[pa.RecordBatch]:
    """A task's reads as rows of :data:`FRAME_SCHEMA`: each plan's records (``_row``
    from the plan's base on), then its end. With ``emitter`` (a fan-out), its rows
    instead: the records with their emit statuses, their derived records, the end; with
    ``report`` too, the emit rows and the ends go into it."""
    sizes = {p.task: p.size for p in tasks}
    schema = FRAME_SCHEMA if emitter is None else emitter.schema
    for res, records in kept:
        if len(records) > sizes[res.task]:  # its rows would run into the next plan's
            raise RuntimeError(
                f"plan {res.task} ({res.shard_id}) read {len(records)} records, more than "
                f"its {sizes[res.task]}"
            )
        if records:
            table = records_to_arrow(records)
            base = bases[res.task]
            if base:
                rows = pa.array(np.arange(base, base + len(records), dtype=np.int64))
                table = table.set_column(table.schema.get_field_index(ROW), ROW, rows)
            table = table.append_column(PLAN, pa.array([res.task] * len(records), pa.int64()))
            table = table.append_column(META, pa.nulls(len(records), pa.binary()))
            table = table.cast(FRAME_SCHEMA)
            if emitter is None:
                yield from table.to_batches()
            else:
                emitted = emitter(table, records)
                if report is not None:
                    report.add(res.task, emitted)
                yield emitted
        end: dict[str, list[Any]] = {name: [None] for name in schema.names}
        end[PLAN], end[META] = [res.task], [pickle.dumps(res)]
        if report is not None:
            report.ends.append(end[META][0])
        yield pa.RecordBatch.from_pydict(end, schema=schema)


def frame_reader(
    tasks: list[list[ReadPlan]],
    settings: ReadSettings,
    to: RecordTo,
    bases: dict[int, int],
    emitter: ReadEmitter | None = None,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` body over ``spark.range(len(tasks))``: task ``i`` reads
    ``tasks[i]`` (:func:`~kinesis_spout.spark.read.recorded.read_recorded`); a plan's
    rows are numbered from its base in ``bases`` (by task number). A fan-out's
    ``emitter`` runs its ``emit`` on the records read (:class:`ReadEmitter`) and, with a
    reporter, reports each task's emit rows once they are all taken."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        reporter = emitter.reporter if emitter is not None else None
        for batch in batches:
            for i in batch.column(0).to_pylist():
                kept = read_recorded(tasks[i], settings, to)
                report = TaskReport() if reporter is not None else None
                yield from stage_batches(kept, tasks[i], bases, emitter, report)
                if reporter is not None and report is not None:
                    reporter.report(i, report)  # all its rows taken: whole

    return run


class ReadEmitter:
    """Runs ``emit`` on the records of each plan a read task read (see the module)."""

    def __init__(
        self,
        emit: EmitFunction,
        derived: pa.Schema,
        n_sinks: int,
        first_root: int,
        reporter: Reporter | None = None,
    ) -> None:
        self.emit = emit
        self.derived = derived
        self.n_sinks = n_sinks
        self.first_root = first_root
        """The root id of row 0; row ``r``'s is ``first_root + r`` (below 2**63)."""
        self.reporter = reporter
        """Where each task reports its emit rows (None: it does not)."""
        seen = set(FRAME_SCHEMA.names)
        self.schema = pa.schema(
            [*FRAME_SCHEMA, *(f for f in stage_schema(derived) if f.name not in seen)]
        )
        """The read stage's columns, then the emit stage's (the derived fields as lists)."""

    def __call__(self, table: pa.Table, records: Sequence[Record]) -> pa.RecordBatch:
        """The rows of one plan's read: ``table``, the records in the read stage's
        columns (``_row`` numbered), and the same ``records``."""
        rows = table.column(ROW).to_numpy().astype(np.int64)
        roots = rows + np.int64(self.first_root)
        got = emit_records(self.emit, self.derived, self.n_sinks, rows, roots, records)
        columns = _named(got) | _named(table)  # _row and the like: the read's
        return pa.RecordBatch.from_arrays(
            [columns[f.name].cast(f.type) for f in self.schema], schema=self.schema
        )


def _named(data: pa.Table | pa.RecordBatch) -> dict[str, Any]:
    """The columns of ``data`` by name (a table's as one array each)."""
    columns = data.columns
    return {
        name: col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        for name, col in zip(data.schema.names, columns, strict=True)
    }
