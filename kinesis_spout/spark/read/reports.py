"""What a fan-out's read tasks report to the driver with their task results, so a
micro-batch whose sinks all wrote everything settles with no statuses' Spark job.

A fan-out's trees are settled from the emit stage's rows (and the statuses of any
sink that returned some, :mod:`~kinesis_spout.spark.process.settle`). When every
sink returned None (it wrote every derived record: the word count, a Parquet
sink), the emit rows are all there is to collect, and they were made in the read
tasks that the sinks' own Spark jobs ran. So each read task also sends them, with
its read ends, in a Spark accumulator (:class:`Reporter`): a compact Arrow table of
its emit rows' partials (:func:`~kinesis_spout.spark.process.settle.written_partials`)
and its plans' pickled results. Spark applies a task's accumulator update when the
task succeeds, before the job that ran it returns, and never for a failed attempt.

The driver uses the reports of a Spark job (:meth:`EmitReports.take`) only when
they are whole and agree:

* every read task of the job reported: a sink that read only part of the records
  (a ``take``) leaves some unreported, and the statuses' job then computes them, as
  without reports;
* no two reports of a task differ. A task computed again (a lost cache block, a
  retried stage) reads the same recorded range
  (:mod:`~kinesis_spout.spark.read.recorded`) and, if ``emit`` is deterministic, makes
  the same rows; an ``emit`` that answers otherwise the second time makes the job's
  reports unusable, and the statuses' job settles from the cached stage instead.

A sink that returns None says it wrote a whole computation of ``emit``, so with or
without reports such sinks rely on ``emit`` answering the same each time Spark
computes a partition. Spark applies no accumulator update of a failed attempt (whose
cached block a later attempt may read) or of a second copy of a finished task, so a
computation that differs is not always seen; nor does the statuses' job, which reads
the cache as it is when it runs, see what an earlier computation gave a sink.
Otherwise nothing changes: the same partials settle the same way. The payloads of the
records whose ``emit`` failed come with the reports too, so such a micro-batch needs no
Spark job to fetch them (:class:`TaskReport`).
"""

from __future__ import annotations

import pickle
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kinesis_spout.records import Record
from kinesis_spout.spark.process.arrow import DATA_COLUMNS
from kinesis_spout.spark.process.settle import PARTIAL_SCHEMA, written_partials
from kinesis_spout.spark.processing import input_record

if TYPE_CHECKING:
    from kinesis_spout.spark.read.plan import ReadResult

Report = tuple[bytes, tuple[bytes, ...], bytes]
"""A read task's report: its emit rows' partials (an Arrow IPC stream of
:data:`~kinesis_spout.spark.process.settle.PARTIAL_SCHEMA`, in plan order), its plans'
pickled results and its records whose ``emit`` failed (pickled ``(plan, index,
values)``, :class:`TaskReport`), both in the order the task's reads ended."""
Failed = dict[tuple[int, int], Record]
"""Records whose ``emit`` failed, by (plan's task number, index in its read)."""
Reports = dict[tuple[int, int], Report]
"""Reports by (Spark job key, read task)."""


@dataclass
class TaskReport:
    """What a fan-out's read task reports besides its rows
    (:mod:`~kinesis_spout.spark.read.reports`): its emit rows' partials, its plans'
    pickled results, and the records whose ``emit`` failed (``(plan, index, values)``,
    the values of :data:`~kinesis_spout.spark.process.arrow.DATA_COLUMNS`)."""

    partials: dict[int, pa.RecordBatch] = field(default_factory=dict)
    """By plan (task number): a task's reads end in any order, its partials are sent in
    plan order, so two computations of a task send the same bytes."""
    ends: list[bytes] = field(default_factory=list)
    failed: list[tuple[int, int, tuple[Any, ...]]] = field(default_factory=list)

    def add(self, res: ReadResult, table: pa.Table, batch: pa.RecordBatch) -> None:
        """One plan's read (``table``, its records) and its emit stage's rows (``batch``)."""
        self.partials[res.task] = written_partials(batch)
        failed = pc.invert(batch.column("_ok").fill_null(False))
        if pc.any(failed).as_py():
            picked = table.select(list(DATA_COLUMNS)).filter(failed).to_pylist()
            indexes = np.flatnonzero(failed.to_numpy(zero_copy_only=False)).tolist()
            for i, values in zip(indexes, picked, strict=True):
                self.failed.append((res.task, i, tuple(values[c] for c in DATA_COLUMNS)))


class _Board:
    """The driver's side of the accumulator: the reports of the jobs that are open."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[int, Reports] = {}
        self.differ: set[int] = set()
        """Open jobs that got two different reports for one task."""
        self.again: set[int] = set()
        """Open jobs with a task that reported more than once (computed again)."""

    def merge(self, reports: Reports) -> None:
        with self.lock:
            for (key, task), report in reports.items():
                got = self.open.get(key)
                if got is None:
                    continue  # a job closed (or never opened here): a late copy
                first = got.setdefault((key, task), report)
                if first is not report:
                    self.again.add(key)
                if first[0] != report[0]:
                    self.differ.add(key)


class _Merge:
    """The accumulator's param: a worker's value is a plain dict of its reports, the
    driver's a :class:`_Board` (never pickled: ``zero`` is what tasks start from)."""

    def zero(self, value: object) -> Reports:
        return {}

    def addInPlace(self, value: Any, term: Reports) -> Any:  # noqa: N802 (PySpark's name)
        if isinstance(value, _Board):
            value.merge(term)
            return value
        value.update(term)
        return value


@dataclass(frozen=True, slots=True)
class Reporter:
    """What a read task of Spark job ``key`` reports through (shipped with its tasks)."""

    accumulator: Any
    key: int
    ends: bool = True
    """Whether the plans' results go too (not when the driver collects the ends first)."""

    def report(self, task: int, report: TaskReport) -> None:
        """Task ``task``'s report, once Spark took all its rows."""
        ends = report.ends if self.ends else []
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, PARTIAL_SCHEMA) as writer:
            for _, batch in sorted(report.partials.items()):
                writer.write_batch(batch)
        value = (sink.getvalue().to_pybytes(), tuple(ends), pickle.dumps(report.failed))
        self.accumulator.add({(self.key, task): value})


@dataclass(frozen=True, slots=True)
class Reported:
    """A Spark job's reports, whole: its emit partials and its plans' results (none if
    they were not asked for)."""

    partials: pa.Table
    results: list[ReadResult]
    failed: Failed
    """The records whose ``emit`` failed: the payloads of the rows the partials fail."""
    again: bool
    """A task reported more than once: Spark computed its reads again."""


class EmitReports:
    """The driver's reports of a fan-out's read tasks (see the module)."""

    def __init__(self, spark: Any) -> None:
        self._board = _Board()
        self._accumulator = spark.sparkContext.accumulator(self._board, _Merge())

    def open(self, key: int, *, ends: bool = True) -> Reporter:
        """The reporter of Spark job ``key``: its reports are kept until :meth:`close`;
        with ``ends``, they hold the plans' results too."""
        with self._board.lock:
            self._board.open[key] = {}
        return Reporter(self._accumulator, key, ends)

    def take(self, key: int, tasks: int) -> Reported | None:
        """Job ``key``'s reports if every one of its ``tasks`` read tasks reported and no
        two reports of a task differ; else None (settle through the statuses' job)."""
        with self._board.lock:
            got = dict(self._board.open.get(key, {}))
            differ = key in self._board.differ
            again = key in self._board.again
        if differ or len(got) != tasks or any((key, t) not in got for t in range(tasks)):
            return None
        tables: list[pa.Table] = []
        results: list[ReadResult] = []
        failed: Failed = {}
        for t in range(tasks):
            partials, ends, records = got[(key, t)]
            tables.append(pa.ipc.open_stream(partials).read_all())
            results.extend(pickle.loads(b) for b in ends)
            for plan, i, values in pickle.loads(records):
                failed[(plan, i)] = input_record(*values)
        table = pa.concat_tables(tables) if tables else PARTIAL_SCHEMA.empty_table()
        return Reported(table, results, failed, again)

    def differ(self, key: int) -> bool:
        """Whether two reports of a task of job ``key`` differ (``emit`` answered
        otherwise when Spark computed its reads again)."""
        with self._board.lock:
            return key in self._board.differ

    def close(self, key: int) -> None:
        """Job ``key`` ended: its reports go, and later copies are not kept."""
        with self._board.lock:
            self._board.open.pop(key, None)
            self._board.differ.discard(key)
            self._board.again.discard(key)
