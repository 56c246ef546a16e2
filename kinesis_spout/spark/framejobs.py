"""Executor reads for the DataFrame styles: a transform or a fan-out over what the
read tasks read, with only statuses, failed payloads and read ends at the driver.

A micro-batch of these styles is:

1. **Read** (:mod:`kinesis_spout.spark.recorded`): the read tasks read their
   shards and record each read's end (first writer wins) before returning any
   record, so a partition Spark computes again has the same records. Their
   output is persisted on the executors; the driver collects only each plan's
   keys and read end (a Spark job).
2. **Process**: the driver numbers the rows (``_row``, plan by plan) and, for a
   fan-out, draws a root id per row; the records become a DataFrame on the
   executors, and the user's transform or fan-out runs on it exactly as with
   driver reads (:meth:`~kinesis_spout.spark.runner.SparkRunner.run_frame`); a
   configured ``sink`` is written by the executors. Statuses come back.
3. **Failed payloads**: only when records failed, their payloads are taken from
   the persisted reads (a small Spark job).

A fan-out's trees are complete when the micro-batch's sinks have answered:
a tree not complete then (a derived record lost) fails its source record.
A job that fails as a whole is isolated by :class:`~kinesis_spout.spark.readjobs.ReadJobs`
as with per-record functions; each of its re-runs is a Spark job of its own
with its own recorded ends.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kinesis_spout.records import Record
from kinesis_spout.spark.arrow import Statuses, input_schema
from kinesis_spout.spark.ledger import FanOutLedger, TreeResults
from kinesis_spout.spark.processing import FanOutProcessor, TransformProcessor
from kinesis_spout.spark.readtask import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.recorded import KeptRead, RecordTo, recorded_task
from kinesis_spout.spark.runner import SparkRunner
from kinesis_spout.streaming.batch_ends import BatchEndStore

log = logging.getLogger(__name__)

PlanKey = tuple[int, str]
"""A plan in a micro-batch: its task number and shard."""


def _meta(kept: KeptRead) -> ReadResult:
    return kept[0]


def _rows(
    bases: dict[PlanKey, int], roots: list[int] | None
) -> Callable[[Iterable[KeptRead]], Iterator[tuple[Any, ...]]]:
    """The rows of the records (the input columns, ``_row``, and ``_root`` for a fan-out)."""

    def run(reads: Iterable[KeptRead]) -> Iterator[tuple[Any, ...]]:
        for res, records in reads:
            base = bases[(res.task, res.shard_id)]
            for i, r in enumerate(records):
                row = (
                    r.stream_name, r.shard_id, r.sequence_number, r.sub_sequence_number,
                    r.partition_key, r.data, r.approximate_arrival, r.attempt, base + i,
                )  # fmt: skip
                yield row if roots is None else (*row, roots[base + i])

    return run


def _picked(
    wanted: dict[PlanKey, set[int]],
) -> Callable[[Iterable[KeptRead]], Iterator[tuple[PlanKey, int, Record]]]:
    def run(reads: Iterable[KeptRead]) -> Iterator[tuple[PlanKey, int, Record]]:
        for res, records in reads:
            key = (res.task, res.shard_id)
            for i in sorted(wanted.get(key, ())):
                yield key, i, records[i]

    return run


class FrameJobs:
    """Runs a micro-batch's plans with a transform or fan-out (see the module docstring)."""

    def __init__(
        self,
        spark: Any,
        processor: TransformProcessor | FanOutProcessor,
        sink: str,
        ends: Callable[[str, int], RecordTo],
        store: BatchEndStore,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spark = spark
        self.runner = SparkRunner(spark, processor, sink_target=sink)
        self.fan_out = isinstance(processor, FanOutProcessor)
        self.ends = ends
        """``ends(run, key)``: where the reads of Spark job ``key`` record their ends."""
        self.store = store
        """The batch-end store (the driver removes what no job needs any more)."""
        self.clock = clock
        self._active: set[int] = set()
        self._schema: Any = None

    def collect(
        self, rdd: Any, plans: list[ReadPlan], settings: ReadSettings, run: str, key: int
    ) -> tuple[list[ReadResult], int]:
        """The results of the plans (an RDD of them, one partition per read task), and
        how many Spark jobs that took."""
        from pyspark import StorageLevel

        self._active.add(key)
        reads = rdd.mapPartitions(recorded_task(settings, self.ends(run, key)))
        reads = reads.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            return self._collect(reads, key)
        finally:
            reads.unpersist()
            self._active.discard(key)
            self.store.forget_before(run, min(self._active, default=key + 1))

    def close(self) -> None:
        self.store.close()

    def _collect(self, reads: Any, key: int) -> tuple[list[ReadResult], int]:
        results: list[ReadResult] = reads.map(_meta).collect()
        bases: dict[PlanKey, int] = {}
        n = 0
        for res in results:
            bases[(res.task, res.shard_id)] = n
            n += len(res)
        if not n:
            return results, 1
        ledger = FanOutLedger(self.runner.n_sinks, timeout=1.0) if self.fan_out else None
        roots = ledger.new_roots(n) if ledger is not None else None
        df = self.spark.createDataFrame(reads.mapPartitions(_rows(bases, roots)), self._struct())
        outcome = self.runner.run_frame(key, df, 0, n)
        if ledger is not None and roots is not None and outcome.ack_vals is not None:
            trees = ledger.apply(range(n), roots, outcome.statuses, outcome.ack_vals,
                                 outcome.sinks, self.clock())  # fmt: skip
            trees.failed += ledger.expire(self.clock() + 2.0).failed
        else:
            trees = _trees(outcome.statuses)
        failed = _place(results, bases, trees)
        jobs = 2 + len(outcome.sinks)
        if failed:
            _fill_payloads(results, reads.mapPartitions(_picked(failed)).collect())
            jobs += 1
        return results, jobs

    def _struct(self) -> Any:
        if self._schema is None:
            from pyspark.sql.pandas.types import from_arrow_schema

            self._schema = from_arrow_schema(input_schema(self.fan_out))
        return self._schema


def _trees(st: Statuses) -> TreeResults:
    """Transform statuses as ack/fail decisions by row."""
    return TreeResults(
        acked=st.ok_rows.tolist(),
        failed=[(r, st.errors.get(r, "failed")) for r in st.failed_rows.tolist()],
    )


def _place(
    results: list[ReadResult], bases: dict[PlanKey, int], trees: TreeResults
) -> dict[PlanKey, set[int]]:
    """Statuses by row into the plans' results; the failed indexes by plan."""
    keys = list(bases)
    filled = [i for i, res in enumerate(results) if len(res)]
    starts = [bases[keys[i]] for i in filled]

    def where(row: int) -> tuple[int, int]:
        at = filled[bisect.bisect_right(starts, row) - 1]  # the plan whose rows hold row
        return at, row - bases[keys[at]]

    for row in trees.acked:
        at, j = where(int(row))
        results[at].ok[j] = 1
    failed: dict[PlanKey, set[int]] = {}
    for row, error in trees.failed:
        at, j = where(int(row))
        results[at].ok[j] = 0
        results[at].errors[j] = error
        failed.setdefault(keys[at], set()).add(j)
    return failed


def _fill_payloads(results: list[ReadResult], picked: list[tuple[PlanKey, int, Record]]) -> None:
    by_key = {(r.task, r.shard_id): r for r in results}
    for key, i, record in picked:
        by_key[key].failed[i] = record
