"""Executor reads: one Spark task reads its shards, processes the records, and
returns only what the driver needs.

The driver (:mod:`kinesis_spout.spark.read.planner`) plans a :class:`ReadPlan` per
shard, and a task gets one or more of them (``shards_per_task``): the shard,
where to start (its open iterator, else after the last key read, else its
initial position) and a record limit; or, for a *retry plan*, the failed
records to process again. On the executor :func:`run_plans`:

* reads the shards (:func:`~kinesis_spout.spark.read.shards.read_shards`:
  interleaved within one deadline, polling or enhanced fan-out, each up to
  its limit in user records, the tip, the end of a closed shard or
  ``read_seconds``; a throttled shard never fails the task);
* runs the user's per-record function on each record (an ``Exception`` fails
  the record; a ``BaseException`` fails the task);
* returns a :class:`ReadResult` per plan: per record its key and status, the error and
  payload **of failed records only**, and the read's end: last key, next
  iterator, MillisBehindLatest, whether the shard ended, its child shards; and
  the figures of the driver's metrics (GetRecords durations, throttles, errors,
  fast retries), so no endpoint runs on an executor.

A task that Spark runs again (a lost executor) starts from the same plans: the
same positions, hence the same records in the same order (at-least-once,
nothing skipped). The driver takes one result per task.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

from kinesis_spout.processinfo import reader_id
from kinesis_spout.records import Record
from kinesis_spout.spark.process.fastretry import FastRetry
from kinesis_spout.spark.processing import RecordFunction, run_records
from kinesis_spout.spark.read.plan import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.read.shards import Read, read_shards


class _Processing:
    """Runs the function on records (with fast retries) and fills a result."""

    def __init__(
        self,
        fn: RecordFunction,
        result: ReadResult,
        keep: list[Record] | None,
        fast: FastRetry | None = None,
    ):
        self.fn = fn
        self.result = result
        self.keep = keep  # ok records, for a row sink
        self.fast = fast or FastRetry()

    def run(self, records: Iterable[Record]) -> None:
        """``fn`` on ``records`` (:func:`~.processing.run_records`), each outcome in the result."""
        res, keep = self.result, self.keep
        add_seq, add_sub, ok = res.seqs.append, res.subs.append, res.ok
        errors, failed = res.errors, res.failed

        def report(r: Record, error: str | None, attempt: int) -> None:
            add_seq(r.sequence_number)
            add_sub(r.sub_sequence_number)
            if attempt > r.attempt:
                res.retried += attempt - r.attempt
            if error is None:
                ok.append(1)
                if keep is not None:
                    keep.append(r)
            else:
                i = len(ok)
                ok.append(0)
                errors[i] = error
                failed[i] = r if attempt == r.attempt else replace(r, attempt=attempt)

        run_records(self.fn, records, self.fast, report)


def run_plan(
    plan: ReadPlan,
    settings: ReadSettings,
    fn: RecordFunction,
    batch_id: int,
) -> ReadResult:
    """One plan as a task of its own (see :func:`run_plans`)."""
    return run_plans([plan], settings, fn, batch_id)[0]


def run_plans(
    plans: list[ReadPlan],
    settings: ReadSettings,
    fn: RecordFunction,
    batch_id: int,
) -> list[ReadResult]:
    """One task: its retry plans processed, its read plans read (interleaved, within
    one deadline, :func:`~kinesis_spout.spark.read.shards.read_shards`) and processed
    page by page; the ok rows written to the sink before the statuses go back."""
    t0 = time.monotonic()
    keep: list[Record] | None = [] if settings.sink != "none" else None
    results: list[ReadResult] = []
    reads: list[Read] = []
    for plan in plans:
        res = ReadResult.for_plan(plan, reader_id(), os.getpid())
        proc = _Processing(fn, res, keep, settings.fast)
        results.append(res)
        if plan.is_retry:
            proc.run(plan.retries)
        else:
            reads.append((plan, proc.run, res))
    if reads:
        read_shards(reads, settings)
    if keep:
        write_rows(settings.sink, batch_id, keep)
    seconds = time.monotonic() - t0
    for res in results:
        res.seconds = seconds
    return results


def write_rows(sink_target: str, batch_id: int, rows: list[Record]) -> None:
    """The ok rows of this task, written before their statuses go back (at-least-once)."""
    from kinesis_spout.spark.process.arrow import records_to_arrow
    from kinesis_spout.spark.process.sinks import write_task_rows

    write_task_rows(sink_target, batch_id, [records_to_arrow(rows).drop_columns(["_row"])])


def task_function(
    settings: ReadSettings, fn: RecordFunction, batch_id: int
) -> Callable[[Iterator[ReadPlan]], Iterator[ReadResult]]:
    """The ``mapPartitions`` body: the plans of the partition, run as one task."""

    def run(plans: Iterator[ReadPlan]) -> Iterator[ReadResult]:
        yield from run_plans(list(plans), settings, fn, batch_id)

    return run
