"""Executor reads for the DataFrame styles: a transform or a fan-out over what the
read tasks read, with only statuses, failed payloads and read ends at the driver.

A micro-batch of these styles is:

1. **Read** (:mod:`kinesis_spout.spark.read.recorded`): the read tasks read their
   shards and record each read's end (first writer wins) before returning any
   record, so a partition Spark computes again has the same records. Their
   output is persisted on the executors; the driver collects only each plan's
   keys and read end (a Spark job).
2. **Process**: the driver numbers the rows (``_row``, plan by plan) and, for a
   fan-out, gives each row its root id (a random first id plus the row: the derived
   ids mix it, :mod:`~kinesis_spout.spark.process.fanout`); the records become a DataFrame on the
   executors, and the user's transform or fan-out runs on it exactly as with
   driver reads (:meth:`~kinesis_spout.spark.process.runner.SparkRunner.run_frame`); a
   configured ``sink`` is written by the executors. Statuses come back.
3. **Failed payloads**: only when records failed, their payloads are taken from
   the persisted reads (a small Spark job).

A fan-out's trees are complete when the micro-batch's sinks have answered: they
are settled in the statuses' Spark job (:mod:`~kinesis_spout.spark.process.settle`, the
edges XORed per root on the executors), and a tree not complete then (a derived
record lost) fails its source record.
A job that fails as a whole is isolated by :class:`~kinesis_spout.spark.read.jobs.ReadJobs`
as with per-record functions; each of its re-runs is a Spark job of its own
with its own recorded ends.
"""

from __future__ import annotations

import bisect
import logging
import pickle
import random
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from kinesis_spout.checkpoint.batch_ends import BatchEndStore
from kinesis_spout.records import Record
from kinesis_spout.spark.process.arrow import (
    DATA_COLUMNS,
    INPUT_SCHEMA,
    ROOT,
    ROW,
    records_to_arrow,
)
from kinesis_spout.spark.process.runner import SparkRunner
from kinesis_spout.spark.processing import FanOutProcessor, TransformProcessor
from kinesis_spout.spark.read.plan import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.read.recorded import KeptRead, RecordTo, read_recorded
from tracker import SequenceKey

log = logging.getLogger(__name__)

PLAN = "_plan"
"""The task number of the plan a row was read for."""
META = "_meta"
"""A plan's pickled :class:`ReadResult` (one row per plan, its other columns null)."""

FRAME_SCHEMA = pa.schema(
    [pa.field(f.name, f.type, nullable=True) for f in INPUT_SCHEMA]
    + [pa.field(PLAN, pa.int64()), pa.field(META, pa.binary())]
)
"""The read stage's rows: a record (``_row`` its index in its plan's read) or a plan's end."""


def _as_batches(kept: list[KeptRead]) -> Iterator[pa.RecordBatch]:
    """A task's reads as rows of :data:`FRAME_SCHEMA`: each plan's records, then its end."""
    for res, records in kept:
        if records:
            table = records_to_arrow(records)
            table = table.append_column(PLAN, pa.array([res.task] * len(records), pa.int64()))
            table = table.append_column(META, pa.nulls(len(records), pa.binary()))
            yield from table.cast(FRAME_SCHEMA).to_batches()
        end: dict[str, list[Any]] = {name: [None] for name in FRAME_SCHEMA.names}
        end[PLAN], end[META] = [res.task], [pickle.dumps(res)]
        yield pa.RecordBatch.from_pydict(end, schema=FRAME_SCHEMA)


def frame_reader(
    tasks: list[list[ReadPlan]], settings: ReadSettings, to: RecordTo
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` body over ``spark.range(len(tasks))``: task ``i`` reads
    ``tasks[i]`` (:func:`~kinesis_spout.spark.read.recorded.read_recorded`)."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield from _as_batches(read_recorded(tasks[i], settings, to))

    return run


def split_tasks(plans: list[ReadPlan], tasks: int) -> list[list[ReadPlan]]:
    """The plans in ``tasks`` groups, in order (as ``parallelize`` slices them)."""
    n = len(plans)
    return [plans[i * n // tasks : (i + 1) * n // tasks] for i in range(tasks)]


class FrameJobs:
    """Runs a micro-batch's plans with a transform or fan-out (see the module docstring)."""

    def __init__(
        self,
        spark: Any,
        processor: TransformProcessor | FanOutProcessor,
        sink: str,
        ends: Callable[[str, int], RecordTo],
        store: BatchEndStore,
    ) -> None:
        self.spark = spark
        self.runner = SparkRunner(spark, processor, sink_target=sink, settle_trees=True)
        self.fan_out = isinstance(processor, FanOutProcessor)
        self.ends = ends
        """``ends(run, key)``: where the reads of Spark job ``key`` record their ends."""
        self.store = store
        """The batch-end store (the driver removes what no job needs any more)."""
        self._active: set[int] = set()
        self._schema: Any = None

    def collect(
        self, plans: list[ReadPlan], tasks: int, settings: ReadSettings, run: str, key: int
    ) -> tuple[list[ReadResult], int]:
        """The results of the plans read in ``tasks`` tasks, and how many Spark jobs
        that took."""
        from pyspark import StorageLevel

        self._active.add(key)
        groups = split_tasks(plans, tasks)
        reader = frame_reader(groups, settings, self.ends(run, key))
        stage = self.spark.range(0, len(groups), 1, len(groups)).mapInArrow(reader, self._struct())
        stage = stage.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            return self._collect(stage, key)
        finally:
            stage.unpersist()
            self._active.discard(key)
            self.store.forget_before(run, min(self._active, default=key + 1))

    def close(self) -> None:
        self.store.close()

    def _collect(self, stage: Any, key: int) -> tuple[list[ReadResult], int]:
        from pyspark.sql import functions as F

        ends = stage.where(F.col(META).isNotNull()).select(PLAN, META).toArrow()
        results: list[ReadResult] = [pickle.loads(b) for b in ends.column(META).to_pylist()]
        bases: dict[int, int] = {}
        n = 0
        for res in results:
            bases[res.task] = n
            n += len(res)
        if not n:
            return results, 1
        base_of = F.create_map(*[F.lit(x) for kv in bases.items() for x in kv])
        row = (F.element_at(base_of, F.col(PLAN)) + F.col(ROW)).alias(ROW)
        columns = [F.col(c) for c in DATA_COLUMNS] + [row]
        if self.fan_out:
            first = random.getrandbits(62)  # the rows' roots: first + row (ids mix them)
            columns.append((F.lit(first) + row).alias(ROOT))
        df = stage.where(F.col(META).isNull()).select(*columns)
        st = self.runner.run_frame(key, df, 0, n).statuses  # rows 0..n-1, trees settled
        failed_rows = [(r, st.errors.get(r, "failed")) for r in st.failed_rows.tolist()]
        failed = _place(results, bases, st.ok, failed_rows)
        jobs = 2 + self.runner.n_sinks  # the read, the statuses, each sink's writes
        if failed:
            _fill_payloads(results, _failed_rows(stage, failed))
            jobs += 1
        return results, jobs

    def _struct(self) -> Any:
        if self._schema is None:
            from pyspark.sql.pandas.types import from_arrow_schema

            self._schema = from_arrow_schema(FRAME_SCHEMA)
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


def _failed_rows(stage: Any, failed: dict[int, set[int]]) -> list[tuple[int, int, Record]]:
    """``(task, index, record)`` of the failed records, from the persisted reads."""
    from pyspark.sql import functions as F

    wanted = F.lit(False)
    for task, rows in failed.items():
        wanted = wanted | ((F.col(PLAN) == task) & F.col(ROW).isin(sorted(rows)))
    table = stage.where(F.col(META).isNull() & wanted).toArrow()
    out = []
    for values in table.to_pylist():
        record = Record(
            values["stream"], values["shardId"], values["sequenceNumber"],
            values["subSequenceNumber"], values["partitionKey"], values["data"],
            values["approximateArrivalTimestamp"],
            SequenceKey(int(values["sequenceNumber"]), values["subSequenceNumber"]),
            attempt=values["attempt"],
        )  # fmt: skip
        out.append((values[PLAN], values[ROW], record))
    return out


def _fill_payloads(results: list[ReadResult], picked: list[tuple[int, int, Record]]) -> None:
    by_task = {r.task: r for r in results}
    for task, i, record in picked:
        by_task[task].failed[i] = record
