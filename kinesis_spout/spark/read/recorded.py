"""Executor reads whose ranges are recorded: every attempt of a task reads the same records.

The DataFrame styles (a transform, a fan-out) hand the records a task read to
Spark as a DataFrame, and Spark may compute a partition of it more than once:
its cached block is lost with an executor, a stage is retried, a speculative
copy runs, the user's code evaluates the DataFrame twice. Each computation must
see exactly the same records, or statuses would come back for records the
driver never saw.

So a read task, once a shard's read is done and **before it returns any record of
it**, records where the read stopped in the checkpoint store's batch-end
records, as the streaming source does (:mod:`kinesis_spout.checkpoint.batch_ends`),
under ``(run, key, shard)``: the run id of the job and the number of
the Spark job the plans belong to. The first writer wins. An attempt that finds
another end recorded reads that range instead: the same plan (same start), up
to the recorded count of user records, checked against the recorded last key.
A leftover attempt of a job whose records were removed fails without recording.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from kinesis_spout.aws import AssumedRole
from kinesis_spout.checkpoint.batch_ends import (
    BatchEnd,
    BatchEndError,
    BatchEndStore,
    PlannedFrom,
    check_planned,
    removed_error,
)
from kinesis_spout.checkpoint.factory import open_batch_ends
from kinesis_spout.config import InitialPosition
from kinesis_spout.processinfo import reader_id
from kinesis_spout.records import ReadEnd, Record, ShardPosition, StartPosition
from kinesis_spout.spark.plan import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.task import Read, fail_unprocessed, read_each_shard, read_shards

REPLAY_ATTEMPTS = 5
"""Reads of a recorded range (each within the read deadline) before the task fails."""

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
    (:func:`~kinesis_spout.spark.read.shards.read_each_shard`). Each result's
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
        store = _store(to.of(plan))
        floor = store.floor(to.run)
        if to.key < floor:
            raise removed_error(store.where(to.run, to.key, plan.shard_id), to.key, floor)
    for i in read_each_shard(reads, settings):
        plan, _, res = reads[i]
        done = _settle(_store(to.of(plan)), to, plan, (res, kept_of[i]), settings)
        done[0].seconds = time.monotonic() - t0
        yield done


def _settle(
    store: BatchEndStore, to: RecordTo, plan: ReadPlan, mine: KeptRead, settings: ReadSettings
) -> KeptRead:
    """Record this read's end; if another attempt recorded first, read its range."""
    planned = planned_from(plan, to.run)
    end = end_of(mine[0], planned)
    if mine[0].end is not None and mine[0].end.failure is not None:
        return mine  # a read that failed as a read: nothing to record, nothing read
    recorded = store.record(to.run, to.key, plan.shard_id, end)
    where = store.where(to.run, to.key, plan.shard_id)
    check_planned(recorded, planned, where)
    if recorded.count == len(mine[0]) and (
        recorded.position is None or recorded.position.key == _last_key(mine[0])
    ):
        return mine  # this read's range: recorded by it, or by an attempt that read the same
    return _replay(plan, recorded, settings, where)


def _last_key(res: ReadResult) -> object:
    return res.record_key(len(res) - 1) if len(res) else None


def _replay(plan: ReadPlan, recorded: BatchEnd, settings: ReadSettings, where: str) -> KeptRead:
    """Read the recorded range again: the plan's start, ``recorded.count`` user records."""
    want = recorded.count
    bounded = replace(plan, limit=want)
    res, kept = _fresh(plan)
    if want == 0:
        ended = recorded.position is not None and recorded.position.ended
        res.end = ReadEnd(plan.position, ended=ended, caught_up=recorded.caught_up)
        return res, kept
    for _ in range(REPLAY_ATTEMPTS):
        part, part_kept = _fresh(plan)
        position = res.end.position if res.end is not None else plan.position
        start = bounded if not kept else replace(bounded, position=position, limit=want - len(kept))
        read_shards([(start, _keeper(part, part_kept), part)], settings)
        _merge(res, part, kept, part_kept)
        if len(kept) >= want:
            break
    assert recorded.position is not None
    if len(kept) != want or _last_key(res) != recorded.position.key:
        raise BatchEndError(
            f"the range recorded at {where} ({want} records up to {recorded.position.key}) "
            f"could not be read again: got {len(kept)} records up to {_last_key(res)}"
        )
    return res, kept


def _merge(res: ReadResult, part: ReadResult, kept: list[Record], part_kept: list[Record]) -> None:
    """A replay's part read into the replay: its records, and its end after the last."""
    kept.extend(part_kept)
    res.seqs.extend(part.seqs)
    res.subs.extend(part.subs)
    res.ok.extend(part.ok)
    if part.end is None:
        return
    if res.end is None:
        res.end = part.end
    else:
        res.end.then(part.end)
