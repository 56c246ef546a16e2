"""Executor reads whose ranges are recorded: every attempt of a task reads the same records.

The DataFrame styles (a transform, a fan-out) hand the records a task read to Spark as
a DataFrame, and Spark may compute a partition of it more than once: its cached block
is lost with an executor, a stage is retried, a speculative copy runs, the user's code
evaluates the DataFrame twice. Each computation must see exactly the same records, or
statuses would come back for records the driver never saw. So a read task, once a
shard's read is done and **before it returns any record of it**, records where the read
stopped under (run, Spark job, shard), first writer wins, and an attempt that finds
another range recorded reads that one again: the streaming source's mechanism
(:mod:`~kinesis_spout.checkpoint.recorded_read`), with the task's own reads (its shards
interleaved) and getters (polled or subscribed).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from kinesis_spout.aws import AssumedRole
from kinesis_spout.checkpoint.batch_ends import BatchEnd, BatchEndStore, PlannedFrom
from kinesis_spout.checkpoint.factory import open_batch_ends
from kinesis_spout.checkpoint.recorded_read import RecordedAt, replay, settle
from kinesis_spout.config import InitialPosition
from kinesis_spout.processinfo import reader_id
from kinesis_spout.records import ReadEnd, Record, ShardPosition, StartPosition
from kinesis_spout.spark.plan import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.task import Read, fail_unprocessed, plan_getter, read_each_shard

REPLAY_DEADLINES = 5
"""Read deadlines (``read_seconds``) a replay of a recorded range may take before the
task fails."""

KeptRead = tuple[ReadResult, list[Record]]
"""A plan's result (keys, end, figures; statuses not yet known) and its records."""


@dataclass(frozen=True, slots=True)
class RecordTo:
    """Where a job's read ends are recorded (shipped with its tasks)."""

    url: str
    """The checkpoint store (``file://DIR``, ``zk://...`` or ``dynamodb://TABLE``)."""
    job: str
    stream: str
    run: str
    """The run id of the job (:attr:`~kinesis_spout.spark.read.jobs.ReadJobs.run_id`)."""
    key: int
    """The Spark job the plans belong to (unique within the run)."""
    zk_auth: str | None = None
    region: str | None = None
    """A ``dynamodb://`` store's region and profile (None: as boto3 resolves them)."""
    profile: str | None = None
    role: AssumedRole | None = None
    """The role a ``dynamodb://`` store's client assumes (None: the profile's own
    credentials)."""

    def open(self) -> BatchEndStore:
        return open_batch_ends(
            self.url,
            self.job,
            self.stream,
            self.zk_auth,
            region=self.region,
            profile=self.profile,
            role=self.role,
        )

    def of(self, plan: ReadPlan) -> RecordTo:
        """Where ``plan``'s end is recorded: under its stream (a job may read several)."""
        return self if plan.stream == self.stream else replace(self, stream=plan.stream)


_STORES: dict[RecordTo, BatchEndStore] = {}
"""Batch-end stores of this executor process (a ZooKeeper session each), by where they
record: every field of a :class:`RecordTo` but its run and Spark job."""


def _store(to: RecordTo) -> BatchEndStore:
    k = replace(to, run="", key=0)
    store = _STORES.get(k)
    if store is None:
        store = _STORES[k] = to.open()
    return store


def planned_from(plan: ReadPlan, run: str) -> PlannedFrom:
    """What a read plan reads from, as a batch-end record names it."""
    pos = plan.position
    assert pos is not None
    after = None
    if pos.after is not None:
        after = ShardPosition(
            str(pos.after.sequence), pos.after.sub_sequence, partial=not pos.after_whole
        )
    start = StartPosition()
    if pos.initial is InitialPosition.AT_TIMESTAMP and pos.timestamp is not None:
        start = StartPosition(InitialPosition.AT_TIMESTAMP, pos.timestamp)
    return PlannedFrom(run, after, start, plan.limit)


def end_of(res: ReadResult, planned: PlannedFrom) -> BatchEnd:
    """Where a read stopped, as a batch-end record."""
    end = res.end or ReadEnd()
    position = None
    if len(res):
        last = res.record_key(len(res) - 1)
        whole = end.position is None or end.position.after_whole
        position = ShardPosition(
            str(last.sequence),
            last.sub_sequence,
            partial=not whole and not end.ended,
            ended=end.ended,
            count=len(res),
        )
    elif end.ended:
        position = ShardPosition(None, ended=True)
    return BatchEnd(
        position,
        caught_up=end.caught_up,
        throttled=bool(end.errors) and not end.events,
        at=time.time(),
        reader=reader_id(),
        planned=planned,
    )


def _keeper(res: ReadResult, kept: list[Record]) -> Callable[[list[Record]], None]:
    """The consumer of a read's pages: keep the records and their keys (statuses later)."""

    def keep(records: list[Record]) -> None:
        kept.extend(records)
        res.add(records)

    return keep


def _fresh(plan: ReadPlan) -> tuple[ReadResult, list[Record]]:
    return ReadResult.for_plan(plan, reader_id(), os.getpid()), []


def read_recorded(
    plans: list[ReadPlan], settings: ReadSettings, to: RecordTo
) -> Iterator[KeptRead]:
    """One task's plans: its retry plans' records first, then each read plan's as soon
    as its read is done and its end recorded (or the recorded range read instead), in
    the order the reads end, while the task's other reads go on
    (:func:`~kinesis_spout.spark.task.read_each_shard`). Each result's
    ``seconds``: from the task's start to its plan's records."""
    t0 = time.monotonic()
    reads: list[Read] = []
    kept_of: list[list[Record]] = []
    for plan in plans:
        res, kept = _fresh(plan)
        if plan.is_retry:
            _keeper(res, kept)(list(plan.retries))
            res.seconds = time.monotonic() - t0
            yield res, kept
        elif plan.fetch is not None:  # its records are not processed: none are kept
            reads.append((plan, fail_unprocessed(res, plan.fetch), res))
            kept_of.append(kept)
        else:
            reads.append((plan, _keeper(res, kept), res))
            kept_of.append(kept)
    if not reads:
        return
    for plan in {to.of(p).stream: p for p, _, _ in reads}.values():  # once per stream
        _at(to, plan).check_kept()
    for i in read_each_shard(reads, settings):
        plan, _, res = reads[i]
        done = _settle(_at(to, plan), plan, (res, kept_of[i]), settings)
        done[0].seconds = time.monotonic() - t0
        yield done


def _at(to: RecordTo, plan: ReadPlan) -> RecordedAt:
    """Where ``plan``'s read end is recorded."""
    return RecordedAt(
        _store(to.of(plan)), to.run, to.key, plan.shard_id, planned_from(plan, to.run)
    )


def _settle(at: RecordedAt, plan: ReadPlan, mine: KeptRead, settings: ReadSettings) -> KeptRead:
    """Record this read's end; if another attempt recorded first, read its range."""
    res = mine[0]
    if res.end is not None and res.end.failure is not None:
        return mine  # a read that failed as a read: nothing to record, nothing read
    return settle(at, mine, end_of(res, at.planned), lambda got: _replay(at, plan, got, settings))


def _replay(at: RecordedAt, plan: ReadPlan, recorded: BatchEnd, settings: ReadSettings) -> KeptRead:
    """Read the recorded range again: the plan's start, ``recorded.count`` user records,
    checked against the recorded last key."""
    res, kept = _fresh(plan)
    rng = at.range_of(recorded)
    if rng is None:
        ended = recorded.position is not None and recorded.position.ended
        res.end = ReadEnd(plan.position, ended=ended, caught_up=recorded.caught_up)
        return res, kept
    pages, res.end = replay(
        plan_getter(replace(plan, limit=recorded.count), settings),
        rng,
        stream=plan.stream,
        per_call=settings.records_per_call,
        seconds=REPLAY_DEADLINES * settings.read_seconds,
    )
    keep = _keeper(res, kept)
    for page in pages:
        keep(page)
    return res, kept
