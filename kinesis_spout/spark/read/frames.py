"""The DataFrame styles (a transform, a fan-out) over what the read tasks read, with only
statuses, failed payloads and read ends at the driver.

A micro-batch is one Spark job while records flow: the read tasks read and record each
read's range before returning a record (:mod:`.stage`), their output persisted and its
rows numbered beforehand (:class:`RowSpace`); the transform, or the fan-out's sinks, run
on it and the statuses come back with the read ends in the same job (a fan-out whose
sinks all wrote everything has none: its read tasks reported their emit rows and ends,
:mod:`.emit_reports`); only when records failed does a small job take their payloads.
After an idle poll the read ends come first, alone: an empty micro-batch runs no user
code and writes no sink. A one-sink fan-out whose last micro-batch settled from its
reports does not cache its reads: its sink's job is the one job that reads them.
"""

from __future__ import annotations

import bisect
import logging
import pickle
import random
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kinesis_spout.checkpoint.batch_ends import BatchEndStore
from kinesis_spout.records import Record
from kinesis_spout.spark.arrowframes import to_arrow
from kinesis_spout.spark.plan import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.process.arrow import DATA_COLUMNS, ROW, Statuses
from kinesis_spout.spark.process.exprs import Exprs
from kinesis_spout.spark.process.runner import SparkRunner
from kinesis_spout.spark.process.styles import FanOutProcessor, TransformProcessor, input_record
from kinesis_spout.spark.read.emit_reports import EmitReports, Reporter
from kinesis_spout.spark.read.keys import JobKeys
from kinesis_spout.spark.read.recorded import RecordTo
from kinesis_spout.spark.read.rows import RowSpace, split_tasks
from kinesis_spout.spark.read.stage import FRAME_SCHEMA, META, PLAN, ReadEmitter, frame_reader

log = logging.getLogger(__name__)

RECOMPUTED = (
    "emit answered otherwise when Spark computed the micro-batch's reads again (uncached): "
    "every record of the micro-batch fails rather than risk an ack"
)
_END = "_end"
"""Marks the read ends among the statuses collected with them (:class:`_Collect`)."""


class _Collect:
    """The statuses' :data:`~kinesis_spout.spark.process.runner.Collect`: their rows
    renumbered ``0..n-1`` (:meth:`RowSpace.dense`); with ``ends``, the read ends come back
    in the same Spark job."""

    def __init__(
        self,
        space: RowSpace,
        ends: Callable[[], Any] | None,
        exprs: Exprs,
        reports: Callable[[], tuple[pa.Table, list[ReadResult]] | None] | None = None,
    ) -> None:
        self.space = space
        self.ends = ends
        self.results: list[ReadResult] = []
        self.exprs = exprs
        self.reports = reports
        """A fan-out's reports of the job (:mod:`.emit_reports`)."""
        self.jobs = 0
        """Spark jobs run to collect: 1 once a statuses' job ran."""

    def reported(self) -> tuple[pa.Table, int, int] | None:
        """The emit rows' partials the read tasks reported, numbered as :meth:`__call__`
        numbers the statuses; None when they are not whole. With the ends still to
        collect, the reports' ends are the job's results."""
        got = self.reports() if self.reports is not None else None
        if got is None:
            return None
        partials, results = got
        if self.ends is not None:
            self.results = results
        table, n = self.space.dense(partials, self.results)
        return table, 0, n

    def __call__(self, frame: Any) -> tuple[pa.Table, int, int]:
        self.jobs = 1
        if self.ends is None:
            table = to_arrow(frame)
        else:
            from pyspark.sql import functions as F

            marked = self.ends().withColumn(_END, self.exprs.get(_END, lambda: F.lit(True)))
            both = to_arrow(frame.unionByName(marked, allowMissingColumns=True))
            is_end = pc.is_valid(both.column(_END))
            metas = both.filter(is_end).column(META).to_pylist()
            self.results = [pickle.loads(b) for b in metas]
            table = both.filter(pc.invert(is_end)).drop_columns([PLAN, META, _END])
        table, n = self.space.dense(table, self.results)
        return table, 0, n


class FrameJobs:
    """Runs a micro-batch's plans with a transform or fan-out (see the module docstring)."""

    def __init__(
        self,
        spark: Any,
        processor: TransformProcessor | FanOutProcessor,
        sink: str,
        ends: Callable[[str, int], RecordTo],
        stores: Sequence[BatchEndStore],
    ) -> None:
        self.spark = spark
        self.runner = SparkRunner(spark, processor, sink_target=sink)
        self.exprs = self.runner.exprs
        self.fan_out = isinstance(processor, FanOutProcessor)
        self.transform = not self.fan_out
        self.ends = ends
        """``ends(run, key)``: where the reads of Spark job ``key`` record their ends."""
        self.stores = list(stores)
        """The batch-end stores of the job's streams (the driver removes what no job needs
        any more)."""
        self.keys = JobKeys()
        """The Spark jobs that run, by key: the batch-end floor they allow."""
        self._forgetting = threading.Lock()
        """One floor raise at a time: the stores' floors then only go up."""
        self._schema: Any = None
        self.reports = EmitReports(spark) if self.fan_out else None
        """What a fan-out's read tasks report (:mod:`.emit_reports`)."""
        self._read_once = True
        """No micro-batch yet, or the last one settled from its reports with no other
        Spark job: a one-sink fan-out's next reads are not cached."""
        self._caught_up: set[tuple[str, str]] = set()
        """Shards (stream, shard) whose last read was at their tip and read nothing."""

    def collect(
        self, plans: list[ReadPlan], tasks: int, settings: ReadSettings, run: str, batch: int
    ) -> tuple[list[ReadResult], int]:
        """The results of micro-batch ``batch``'s plans read in ``tasks`` tasks, and how
        many Spark jobs that took."""
        from pyspark import StorageLevel

        key = self.keys.begin(batch)
        stage = None
        try:  # from the key on: whatever fails, the key ends (else it holds the floor)
            space = RowSpace(plans)
            flowing = self._flowing(plans)
            reporter = self.reports.open(key, ends=flowing) if self.reports else None
            emitter = self._emitter(reporter)
            to = self.ends(run, key)
            reader = frame_reader(split_tasks(plans, tasks), settings, to, space.bases, emitter)
            struct = self._struct(emitter)
            stage = self.spark.range(0, tasks, 1, tasks).mapInArrow(reader, struct)
            uncached = flowing and self._read_once and self.runner.n_sinks == 1
            if not uncached:
                stage = stage.persist(StorageLevel.MEMORY_AND_DISK)
            reported = partial(self.reports.take, key, tasks) if self.reports else None
            got = _Collect(space, None, self.exprs, reported)
            if flowing:
                results, jobs = self._in_one(stage, key, got, uncached)
            else:
                results, jobs = self._in_two(stage, key, got)
            self.keys.if_running(key, lambda: self._note_tips(results))  # not if given up
            return results, jobs
        finally:
            if stage is not None:
                stage.unpersist()
            if self.reports is not None:
                self.reports.close(key)
            self.keys.end(key)
            self._forget(run)

    def give_up(self, batch: int) -> None:
        """The driver gave up micro-batch ``batch``: its jobs no longer hold back the
        removal of batch ends (the next job to end removes theirs), and it starts no
        new one (:mod:`~kinesis_spout.spark.read.keys`). No store call: the driver's
        thread does not wait on the store."""
        self.keys.give_up(batch)

    def _forget(self, run: str) -> None:
        """Remove the batch ends that no running job needs. Cleanup only: a store error
        is logged, and the next job to end tries again."""
        with self._forgetting:
            floor = self.keys.floor()
            for store in self.stores:
                try:
                    store.forget_before(run, floor)
                except Exception as exc:
                    log.warning("removing batch ends of run %s before job %d: %s", run, floor, exc)

    def close(self) -> None:
        for store in self.stores:
            store.close()

    def _flowing(self, plans: list[ReadPlan]) -> bool:
        """Records are likely: a retry plan, or a shard whose last read found some (or was
        not at its tip). Then the read and the processing are one Spark job; else the
        read goes first, and nothing is processed (no user code, no sink write) when it
        read nothing: an idle poll costs one small job."""
        return any(p.is_retry or (p.stream, p.shard_id) not in self._caught_up for p in plans)

    def _note_tips(self, results: list[ReadResult]) -> None:
        """Whether each shard read sat at its tip with nothing read; a shard not in this
        micro-batch (its backoff kept it out) keeps what its last read said."""
        for r in results:
            if r.end is None:
                continue  # a retry plan says nothing of the shard's tip
            key = r.key
            if r.end.caught_up and not len(r) and not r.end.ended:
                self._caught_up.add(key)
            else:
                self._caught_up.discard(key)

    def _in_one(
        self, stage: Any, key: int, got: _Collect, uncached: bool
    ) -> tuple[list[ReadResult], int]:
        """Read and process in one Spark job: the read ends come back with the statuses
        (or in the read tasks' reports).

        Reads not cached (``uncached``) that a statuses' job read again: should ``emit``
        have answered otherwise there than for the sink (a task's reports differ), the
        sink's statuses may be of derived records that job did not make, so every record
        of the micro-batch fails (and is retried) rather than risk an ack."""
        got.ends = lambda: self._ends(stage)
        st = self._process(key, stage, got)
        if uncached and got.jobs and self.reports is not None and self.reports.differ(key):
            st = _all_failed(st, RECOMPUTED)
        results, fetched = self._settle(stage, got, st)
        self._read_once = not got.jobs and not fetched
        return results, got.jobs + self.runner.n_sinks + fetched

    def _in_two(self, stage: Any, key: int, got: _Collect) -> tuple[list[ReadResult], int]:
        """The read ends first; the processing only if something was read."""
        ends = to_arrow(self._ends(stage))
        results = [pickle.loads(b) for b in ends.column(META).to_pylist()]
        if not any(len(res) for res in results):
            return results, 1
        got.results = results
        st = self._process(key, stage, got)
        results, fetched = self._settle(stage, got, st)
        return results, 1 + got.jobs + self.runner.n_sinks + fetched

    def _ends(self, stage: Any) -> Any:
        """The read ends' rows of the stage (task number and pickled result)."""
        from pyspark.sql import functions as F

        x = self.exprs
        return stage.where(x.get("ends", lambda: F.col(META).isNotNull())).select(
            *x.columns(PLAN, META)
        )

    def _process(self, key: int, stage: Any, got: _Collect) -> Statuses:
        """The transform on the records the stage read, or the rest of a fan-out whose
        ``emit`` ran in the read (a row per record, its derived records in lists); their
        statuses."""
        from pyspark.sql import functions as F

        x = self.exprs
        read = stage.where(x.get("records", lambda: F.col(META).isNull()))
        if self.fan_out:
            return self.runner.run_emitted(key, read, got, got.reported).statuses
        frame = read.select(*x.columns(*DATA_COLUMNS, ROW))
        return self.runner.run_frame(key, frame, got).statuses

    def _emitter(self, reporter: Reporter | None) -> ReadEmitter | None:
        """A fan-out's ``emit`` for this micro-batch's read tasks, its roots from a fresh
        random first id, its tasks reporting to ``reporter`` (None for a transform)."""
        p = self.runner.processor
        if not isinstance(p, FanOutProcessor):
            return None
        first = random.getrandbits(62)  # the rows' roots: first + row (ids mix them)
        derived = self.runner.fan_out_schema()
        return ReadEmitter(p.emit, derived, self.runner.n_sinks, first, reporter)

    def _settle(self, stage: Any, got: _Collect, st: Statuses) -> tuple[list[ReadResult], int]:
        """The statuses (rows ``0..n-1``, plan by plan) into the plans' results, in plan
        order, and the payloads of the failed records from the persisted reads. The second
        value counts the Spark jobs that took: 1 when records failed."""
        space = got.space
        ordered, dense = space.order(got.results)
        failed_rows = [(r, st.errors.get(r, "failed")) for r in st.failed_rows.tolist()]
        failed = _place(ordered, dense, st.ok, failed_rows)
        if not failed:
            return ordered, 0
        _fill_payloads(ordered, _failed_rows(stage, failed, space.bases))
        return ordered, 1

    def _struct(self, emitter: ReadEmitter | None) -> Any:
        """The Spark schema of the read stage's rows (made once per job)."""
        if self._schema is None:
            from pyspark.sql.pandas.types import from_arrow_schema

            self._schema = from_arrow_schema(FRAME_SCHEMA if emitter is None else emitter.schema)
        return self._schema


def _place(
    results: list[ReadResult],
    bases: dict[int, int],
    ok: np.ndarray[Any, np.dtype[np.bool_]],
    failed_rows: list[tuple[int, str]],
) -> dict[int, set[int]]:
    """Statuses by row (``ok[row]``, the failed rows with their errors) into the plans'
    results, a slice of ``ok`` per plan (no Python work per ok record); the failed
    indexes by plan (task)."""
    filled = [i for i, res in enumerate(results) if len(res)]
    starts = [bases[results[i].task] for i in filled]
    for i, base in zip(filled, starts, strict=True):
        res = results[i]
        res.ok[:] = ok[base : base + len(res)].astype(np.uint8).tobytes()
    failed: dict[int, set[int]] = {}
    for row, error in failed_rows:
        res = results[filled[bisect.bisect_right(starts, int(row)) - 1]]  # the plan holding row
        j = int(row) - bases[res.task]
        res.ok[j] = 0
        res.errors[j] = error
        failed.setdefault(res.task, set()).add(j)
    return failed


def _all_failed(st: Statuses, error: str) -> Statuses:
    """Every row of ``st`` failed with ``error``."""
    n = st.stop - st.start
    errors = {st.start + i: error for i in range(n)}
    return Statuses(st.start, st.stop, np.zeros(n, dtype=bool), errors)


def _failed_rows(
    stage: Any, failed: dict[int, set[int]], bases: dict[int, int]
) -> list[tuple[int, int, Record]]:
    """``(task, index, record)`` of the failed records, from the persisted reads."""
    from pyspark.sql import functions as F

    rows = sorted(bases[task] + i for task, indexes in failed.items() for i in indexes)
    table = to_arrow(stage.where(F.col(META).isNull() & F.col(ROW).isin(rows)))
    out = []
    for values in table.to_pylist():
        record = input_record(*(values[name] for name in DATA_COLUMNS))
        out.append((values[PLAN], values[ROW] - bases[values[PLAN]], record))
    return out


def _fill_payloads(results: list[ReadResult], picked: list[tuple[int, int, Record]]) -> None:
    by_task = {r.task: r for r in results}
    for task, i, record in picked:
        by_task[task].failed[i] = record
