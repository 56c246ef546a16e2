"""What a fan-out's read tasks report with their task results, so a micro-batch whose
sinks all wrote everything settles with no statuses' Spark job.

When every sink returns None (the word count, a Parquet sink), the emit stage's rows
settle the trees alone, and the read tasks that made them ran in the sinks' own Spark
jobs. So each read task also sends their partials
(:func:`~kinesis_spout.spark.process.settle.written_partials`) and its plans' results
in a Spark accumulator, once Spark took all its rows. Spark applies a task's update
when the task succeeds, never for a failed attempt. The driver uses a job's reports
only if every read task reported and no task reported twice with other rows (``emit``
answered otherwise when Spark computed the task again); else the statuses' job settles
from the stage. Kept for the fan-out's driver CPU per record and, since a one-sink
fan-out settled from reports needs no cache (:mod:`.frames`), its records/s.
"""

from __future__ import annotations

import pickle
import threading
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kinesis_spout.spark.plan import ReadResult
from kinesis_spout.spark.process.settle import PARTIAL_SCHEMA, written_partials

Report = tuple[bytes, tuple[bytes, ...]]
"""A read task's report: its emit rows' partials (an Arrow IPC stream of
:data:`~kinesis_spout.spark.process.settle.PARTIAL_SCHEMA`, in plan order) and its
plans' pickled results."""


@dataclass
class TaskReport:
    """What one read task gathers while Spark takes its rows."""

    partials: dict[int, pa.RecordBatch] = field(default_factory=dict)
    """By plan (task number): sent in plan order, so two computations of a task send the
    same bytes whatever order its reads ended in."""
    ends: list[bytes] = field(default_factory=list)

    def add(self, plan: int, emitted: pa.RecordBatch) -> None:
        """Plan ``plan``'s emit stage rows."""
        self.partials[plan] = written_partials(emitted)


class _Board:
    """The driver's side of the accumulator: the reports of the Spark jobs open now."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[int, dict[int, Report]] = {}
        self.differ: set[int] = set()
        """Open jobs with a task that reported twice with other rows."""

    def merge(self, reports: dict[tuple[int, int], Report]) -> None:
        with self.lock:
            for (key, task), report in reports.items():
                got = self.open.get(key)
                if got is None:
                    continue  # a job closed (or never opened here): a late copy
                if got.setdefault(task, report)[0] != report[0]:
                    self.differ.add(key)


class _Merge:
    """The accumulator's param: a task's value is a plain dict of its reports, the
    driver's a :class:`_Board` (never pickled: tasks start from ``zero``)."""

    def zero(self, value: object) -> dict[tuple[int, int], Report]:
        return {}

    def addInPlace(self, value: Any, term: dict[tuple[int, int], Report]) -> Any:  # noqa: N802
        if isinstance(value, _Board):
            value.merge(term)
        else:
            value.update(term)
        return value


@dataclass(frozen=True, slots=True)
class Reporter:
    """What the read tasks of Spark job ``key`` report through (shipped with them)."""

    accumulator: Any
    key: int
    ends: bool
    """Whether the plans' results go too (not when the driver collected them first)."""

    def report(self, task: int, report: TaskReport) -> None:
        """Read task ``task``'s report, once Spark took all its rows."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, PARTIAL_SCHEMA) as writer:
            for _, batch in sorted(report.partials.items()):
                writer.write_batch(batch)
        ends = tuple(report.ends) if self.ends else ()
        self.accumulator.add({(self.key, task): (sink.getvalue().to_pybytes(), ends)})


class EmitReports:
    """The driver's reports of a fan-out's read tasks, by Spark job (see the module)."""

    def __init__(self, spark: Any) -> None:
        self._board = _Board()
        self._accumulator = spark.sparkContext.accumulator(self._board, _Merge())

    def open(self, key: int, *, ends: bool) -> Reporter:
        """The reporter of Spark job ``key``, whose reports are kept until :meth:`close`."""
        with self._board.lock:
            self._board.open[key] = {}
        return Reporter(self._accumulator, key, ends)

    def take(self, key: int, tasks: int) -> tuple[pa.Table, list[ReadResult]] | None:
        """Job ``key``'s emit partials and plans' results (none if not asked for), if each
        of its ``tasks`` read tasks reported and no task's reports differ; else None."""
        with self._board.lock:
            got = dict(self._board.open.get(key, {}))
            if key in self._board.differ or sorted(got) != list(range(tasks)):
                return None
        tables = [pa.ipc.open_stream(got[t][0]).read_all() for t in range(tasks)]
        results = [pickle.loads(b) for t in range(tasks) for b in got[t][1]]
        return pa.concat_tables([PARTIAL_SCHEMA.empty_table(), *tables]), results

    def differ(self, key: int) -> bool:
        """Whether a task of job ``key`` reported twice with other rows."""
        with self._board.lock:
            return key in self._board.differ

    def close(self, key: int) -> None:
        """Job ``key`` ended: its reports go, and later copies are not kept."""
        with self._board.lock:
            self._board.open.pop(key, None)
            self._board.differ.discard(key)
