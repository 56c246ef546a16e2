"""A read task on an executor: its plans' shards read, the records processed, only
statuses, failed payloads and each read's end returned.

A task gets one or more plans of a micro-batch (``shards_per_task``). It reads its
shards within one deadline (``read_seconds``) with the bounded read every reading mode
shares (:mod:`kinesis_spout.kinesis.bounded`): polled shards interleaved, up to
``poll_threads`` calls in flight, a throttled shard's backoff spent on the others and an
idle shard costing one GetRecords; subscribed shards (``consumer = "efo"``) one after
the other. Each shard's read goes up to its plan's limit in user records, the tip, the
end of a closed shard or the deadline, and hands each shard's records on as soon as its
read ends. A read that fails as a read (the stream deleted, access denied) says so in
its end instead of failing the task. A *fetch plan* (quarantine) reads its one record
and returns it failed, unprocessed.

A task that Spark runs again (a lost executor) starts from the same plans: the same
positions, hence the same records (at-least-once, nothing skipped).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Protocol

from kinesis_spout.kinesis.bounded import BoundedGetter, BoundedRead, Take, read_each, read_until
from kinesis_spout.kinesis.efo_getter import EfoShardGetter
from kinesis_spout.kinesis.efo_read import EfoTarget, subscribed_getter
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.processinfo import reader_id
from kinesis_spout.records import ReadEnd, Record, ShardBatch
from kinesis_spout.spark.plan import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.process.fastretry import FastRetry
from kinesis_spout.spark.process.styles import RecordFunction, run_records
from tracker import ExponentialBackoff, JitteredBackoff

Consume = Callable[[list[Record]], None]
Read = tuple[ReadPlan, Consume, ReadResult]
"""A read plan, what consumes its records (a read's, in order), and the result it fills."""


def read_shards(reads: list[Read], settings: ReadSettings) -> None:
    """Read every plan of a task until its limit or the end of its data, all of them
    within one deadline (:func:`read_each_shard`, waited out)."""
    for _ in read_each_shard(reads, settings):
        pass


def read_each_shard(reads: list[Read], settings: ReadSettings) -> Iterator[int]:
    """Read every plan of a task within one deadline (``read_seconds`` from now), each by
    :class:`~kinesis_spout.kinesis.bounded.BoundedRead`; yield the index of each read in
    ``reads`` once its records are consumed and its end is in its result, as soon as it
    is done (subscribed shards first, one after the other, each within what is left of
    the deadline; then the polled ones interleaved)."""
    deadline = time.monotonic() + settings.read_seconds
    polled: list[tuple[BoundedRead, ReadResult, int]] = []
    for i, (plan, consume, res) in enumerate(reads):
        assert plan.position is not None
        target = settings.target(plan.stream)
        if target.consumer_arn is not None:
            left = max(deadline - time.monotonic(), 0.0)
            res.end = read_subscribed(plan, settings, consume, seconds=left)
            yield i
            continue
        read = BoundedRead(
            polling_getter(plan, settings),
            plan.limit,
            _taker(consume),
            per_call=settings.records_per_call,
            fail_soft=True,
        )
        polled.append((read, res, i))
    for j, end in read_each([r for r, _, _ in polled], deadline, settings.poll_threads):
        _, res, i = polled[j]
        res.end = end
        yield i


def _taker(consume: Consume) -> Take:
    """A page's records to the consumer; all of them are taken."""

    def take(batch: ShardBatch) -> int:
        consume(batch.records)
        return len(batch.records)

    return take


def polling_getter(plan: ReadPlan, settings: ReadSettings) -> KinesisShardGetter:
    """The task's GetRecords getter at the plan's position (retries inside the task)."""
    from kinesis_spout.kinesis.api import KinesisApi
    from kinesis_spout.kinesis.client import process_client

    pos = plan.position
    assert pos is not None
    target = settings.target(plan.stream)
    client = process_client(
        settings.endpoint_url, settings.region, profile=settings.profile, role=settings.role
    )
    return KinesisShardGetter(
        KinesisApi(client, target.name, target.arn),
        plan.shard_id,
        backoff=JitteredBackoff(
            ExponentialBackoff(settings.throttle_backoff, cap=settings.throttle_backoff_max),
            random.Random(),
        ),
        start=pos.after,
        after_whole=pos.after_whole,
        iterator=pos.iterator,
        position=pos.initial,
        timestamp=pos.timestamp,
        limit=min(settings.records_per_call, max(plan.limit, 1)),
        max_calls_per_second=settings.max_calls_per_second,
        empty_shard_backoff=0.0,
    )


def read_subscribed(
    plan: ReadPlan, settings: ReadSettings, consume: Consume, *, seconds: float | None = None
) -> ReadEnd:
    """Enhanced fan-out: subscribe at the plan's position and take events until its
    limit, the tip, the shard's end or ``seconds`` (``read_seconds`` by default)."""
    budget = settings.read_seconds if seconds is None else seconds
    getter = _subscribed_getter(plan, settings)
    return read_until(getter, plan.limit, budget, _taker(consume), fail_soft=True)


def _subscribed_getter(plan: ReadPlan, settings: ReadSettings) -> EfoShardGetter:
    """The task's subscription to the plan's shard at its position (``consumer = "efo"``)."""
    pos = plan.position
    target = settings.target(plan.stream)
    assert pos is not None and target.consumer_arn is not None
    efo = EfoTarget(
        target.name,
        settings.region,
        settings.endpoint_url,
        target.consumer_arn,
        settings.throttle_backoff,
        settings.throttle_backoff_max,
        settings.profile,
        settings.role,
    )
    return subscribed_getter(
        efo,
        plan.shard_id,
        start=pos.after,
        after_whole=pos.after_whole,
        position=pos.initial,
        timestamp=pos.timestamp,
        limit=plan.limit,
        closed=plan.closed,
    )


def plan_getter(plan: ReadPlan, settings: ReadSettings) -> BoundedGetter:
    """The getter of the plan's shard at its position, as its task reads it: subscribed
    with ``consumer = "efo"``, else by GetRecords."""
    if settings.target(plan.stream).consumer_arn is not None:
        return _subscribed_getter(plan, settings)
    return polling_getter(plan, settings)


# --- the per-record style ---------------------------------------------------------------


def process_records(
    fn: RecordFunction, res: ReadResult, keep: list[Record] | None, fast: FastRetry
) -> Consume:
    """The consumer of a read's pages (or a retry plan's records): ``fn`` on each record
    (with fast retries), its status into ``res``; the ok ones kept for a row sink."""
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

    return lambda records: run_records(fn, records, fast, report)


def fail_unprocessed(res: ReadResult, error: str) -> Consume:
    """The consumer of a fetch plan's read: each record failed with ``error``, unprocessed."""

    def fail(records: list[Record]) -> None:
        for r in records:
            i = len(res.ok)
            res.add([r])
            res.ok[i] = 0
            res.errors[i] = error
            res.failed[i] = r

    return fail


class Journal(Protocol):
    """How a task in the sandbox reports its progress as it goes
    (:class:`kinesis_spout.spark.sandbox.Journal`)."""

    def consumer(self, plan: int, fn: RecordFunction, fast: FastRetry) -> Consume: ...

    def unprocessed(self, plan: int, error: str) -> Consume: ...

    def ended(self, plan: int, end: ReadEnd | None) -> None: ...


def run_plans(
    plans: list[ReadPlan],
    settings: ReadSettings,
    fn: RecordFunction,
    batch_id: int,
    journal: Journal | None = None,
) -> list[ReadResult]:
    """One task: its retry plans processed, its read plans read (interleaved, within one
    deadline) and processed as each read ends; the ok rows written to the sink before
    the statuses go back. With a ``journal`` (the sandbox's child) each plan's progress
    goes there instead of into the results."""
    t0 = time.monotonic()
    keep: list[Record] | None = [] if settings.sink != "none" else None
    results: list[ReadResult] = []
    reads: list[Read] = []
    read_plan: list[int] = []
    for i, plan in enumerate(plans):
        res = ReadResult.for_plan(plan, reader_id(), os.getpid())
        results.append(res)
        if plan.fetch is not None:
            fail = fail_unprocessed(res, plan.fetch)
            if journal is not None:
                fail = journal.unprocessed(i, plan.fetch)
            reads.append((plan, fail, res))
            read_plan.append(i)
            continue
        if journal is None:
            consume = process_records(fn, res, keep, settings.fast)
        else:
            consume = journal.consumer(i, fn, settings.fast)
        if plan.is_retry:
            consume(list(plan.retries))
            if journal is not None:
                journal.ended(i, None)
        else:
            reads.append((plan, consume, res))
            read_plan.append(i)
    for j in read_each_shard(reads, settings):
        if journal is not None:
            journal.ended(read_plan[j], reads[j][2].end)
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
