"""Executor reads with ``process_partitions``: records spread past the shards.

The read tasks (their shards grouped as in any micro-batch) only read; their
records go through a Spark shuffle to ``process_partitions`` processing tasks
(record ``i`` of plan ``t`` to partition ``(t + i) % P``), which run the function and return one
status row per record (the payload only of a failed one). Each read task
also sends its end (a :class:`~kinesis_spout.spark.plan.ReadResult`
without statuses, and its record count) through the shuffle. Nothing goes
to the driver but statuses and those ends.

A read task that Spark runs again (a lost shuffle output) reads the same
records from the same position, so record ``i`` of a task is the same record
in every attempt. The driver checks that every record ``0..n-1`` of a task
came back exactly once; if not (attempts that read different lengths were
mixed) the task's read is dropped: its position does not move, and the same
records are read again in the next batch (at-least-once, nothing skipped).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from kinesis_spout.processinfo import reader_id
from kinesis_spout.records import Record
from kinesis_spout.spark.plan import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.process.arrow import format_error
from kinesis_spout.spark.process.styles import RecordFunction
from kinesis_spout.spark.task import Read, fail_unprocessed, read_shards, write_rows
from kinesis_spout.spark.worker_heap import freeze_imports

log = logging.getLogger(__name__)

Status = tuple[str, int, int, str, int, str | None, Record | None, int]
"""("s", task, index, sequence, sub, error or None, payload if failed, extra deliveries
by fast retries)."""
LOST = "its status was lost in a re-run of the processing stage"


def _read_stage(
    settings: ReadSettings, parts: int
) -> Callable[[Iterator[ReadPlan]], Iterator[tuple[int, Any]]]:
    def run(plans: Iterator[ReadPlan]) -> Iterator[tuple[int, Any]]:
        import os

        freeze_imports()
        taken: list[tuple[ReadPlan, ReadResult, list[Record]]] = []
        reads: list[Read] = []
        for plan in plans:
            res = ReadResult.for_plan(plan, reader_id(), os.getpid())
            records: list[Record] = list(plan.retries)
            taken.append((plan, res, records))
            if plan.fetch is not None:  # failed unprocessed: its result is whole already
                reads.append((plan, fail_unprocessed(res, plan.fetch), res))
            elif not plan.is_retry:
                reads.append((plan, records.extend, res))
        read_shards(reads, settings)  # the task's shards, within one deadline
        for plan, res, records in taken:
            for i, r in enumerate(records):
                yield (plan.task + i) % parts, ("r", plan.task, i, r)
            yield plan.task % parts, ("m", plan.task, res, len(records))

    return run


def _process_stage(
    settings: ReadSettings, fn: RecordFunction, batch_id: int
) -> Callable[[Iterator[tuple[int, Any]]], Iterator[Any]]:
    def run(items: Iterator[tuple[int, Any]]) -> Iterator[Any]:
        keep: list[Record] = []
        for _, item in items:
            if item[0] == "m":
                yield item
                continue
            _, task, i, r = item
            error, attempt = settings.fast.call(fn, r, format_error)
            extra = attempt - r.attempt  # fast retries, whether they ended ok or not
            last = None  # the payload, for a failed record only
            if error is not None:
                last = replace(r, attempt=attempt) if extra else r
            yield ("s", task, i, r.sequence_number, r.sub_sequence_number, error, last, extra)
            if error is None and settings.sink != "none":
                keep.append(r)
        if keep:
            write_rows(settings.sink, batch_id, keep)

    return run


def shuffled_results(
    rdd: Any,
    plans: list[ReadPlan],
    settings: ReadSettings,
    fn: RecordFunction,
    batch_id: int,
    parts: int,
) -> list[ReadResult]:
    """Read, shuffle onto ``parts`` partitions, process; the results per plan."""
    rows = (
        rdd.mapPartitions(_read_stage(settings, parts))
        .partitionBy(parts, lambda k: k)
        .mapPartitions(_process_stage(settings, fn, batch_id))
        .collect()
    )
    return assemble(plans, rows)


def assemble(plans: list[ReadPlan], rows: list[Any]) -> list[ReadResult]:
    """Each plan's result from the status rows and ends; checked (module docstring)."""
    ends: dict[int, tuple[ReadResult, int]] = {}
    statuses: dict[int, dict[int, Status]] = {}
    for row in rows:
        if row[0] == "m":
            ends[row[1]] = (row[2], row[3])
        else:
            statuses.setdefault(row[1], {})[row[2]] = row
    out: list[ReadResult] = []
    for plan in plans:
        end = ends.get(plan.task)
        got = statuses.get(plan.task, {})
        if end is None:
            log.warning("task %d (shard %s): no end came back; dropped", plan.task, plan.shard_id)
            continue
        res, n = end
        if (len(got) != n or (n and max(got) != n - 1)) and not plan.is_retry:
            log.warning(
                "task %d (shard %s): %d of %d statuses (re-run attempts mixed); "
                "the same records are read again",
                plan.task,
                plan.shard_id,
                len(got),
                n,
            )
            continue
        _fill(res, plan, got, n)
        out.append(res)
    return out


def _fill(res: ReadResult, plan: ReadPlan, got: dict[int, Status], n: int) -> None:
    for i in range(n):
        st = got.get(i)
        if st is None:  # a retry whose status was lost: failed again (it stays known)
            r = plan.retries[i]
            res.seqs.append(r.sequence_number)
            res.subs.append(r.sub_sequence_number)
            res.ok.append(0)
            res.errors[i] = LOST
            res.failed[i] = r
            continue
        res.seqs.append(st[3])
        res.subs.append(st[4])
        if st[5] is None:
            res.ok.append(1)
        else:
            res.ok.append(0)
            res.errors[i] = st[5]
            assert st[6] is not None
            res.failed[i] = st[6]
        res.retried += st[7]
