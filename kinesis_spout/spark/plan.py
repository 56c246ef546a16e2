"""Planning each micro-batch from the reader's shards, and applying what its tasks read.

The driver's :class:`~kinesis_spout.spout.KinesisSpout` reads nothing itself
(``read_here=False``): it keeps shards, trackers, retries, dead letters, checkpoints and,
per shard, a cursor. :class:`Planner` plans from it (a retry plan per shard with due
retries; a read plan from the cursor, its limit the smaller of ``batch_size`` and the
replay window's room; a fetch plan for a quarantined shard) and applies each result in
one step: statuses to the tracker (sparsely), the read's end to the core. A read that
failed as a read is never a record's fault: a stream gone is let go, anything else
pauses the shard with a backoff.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kinesis_spout.aws import AssumedRole
from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.core.shardset import ShardSet
from kinesis_spout.errors import InvalidPositionError, StreamNotFoundError
from kinesis_spout.records import GetterPosition, ReadEnd, Record, ShardKey, ShardState
from kinesis_spout.spark.process.fastretry import FastRetry
from tracker import SequenceKey

if TYPE_CHECKING:
    from kinesis_spout.config import SpoutConfig
    from kinesis_spout.spark.quarantine import Quarantine
    from kinesis_spout.spout import KinesisSpout

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StreamTarget:
    """How the tasks of a job call one of its streams."""

    name: str
    arn: str | None = None
    """Given: the calls name the stream by ``StreamARN``."""
    consumer_arn: str | None = None
    """``consumer = "efo"``: the consumer the tasks subscribe as, on this stream."""


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """What every task of a job needs from the config (shipped once per job)."""

    region: str
    endpoint_url: str | None
    records_per_call: int
    max_calls_per_second: float
    throttle_backoff: float
    throttle_backoff_max: float
    read_seconds: float
    """Longest a task keeps reading (throttled or behind) before it returns."""
    sink: str = "none"
    fast: FastRetry = FastRetry()
    """Fast retries of failing records inside the task."""
    profile: str | None = None
    """The AWS profile of the tasks' clients (None: ``AWS_PROFILE`` or the default chain)."""
    role: AssumedRole | None = None
    """The IAM role the tasks' clients assume (None: the profile's own credentials)."""
    poll_threads: int = 1
    """GetRecords calls a task keeps in flight at once (one per shard at most)."""
    streams: tuple[StreamTarget, ...] = ()
    """Each stream's name, ARN and consumer (a plan says its stream)."""
    record_timeout: float = 0.0
    """``task_timeout``: the longest one record's call may run in the per-record style's
    sandbox before it is failed alone (0: no limit)."""

    @property
    def subscribes(self) -> bool:
        """The tasks subscribe (``consumer = "efo"`` on any of the job's streams)."""
        return any(t.consumer_arn for t in self.streams)

    def target(self, stream: str) -> StreamTarget:
        """How the tasks call ``stream``."""
        for t in self.streams:
            if t.name == stream:
                return t
        return StreamTarget(stream)

    @classmethod
    def of(cls, config: SpoutConfig) -> ReadSettings:
        return cls(
            config.region,
            config.endpoint_url,
            config.records_per_call,
            config.max_calls_per_second,
            config.throttle_backoff,
            config.throttle_backoff_max,
            read_seconds=max(config.batch_max_wait, 1.0),
            sink=config.sink,
            fast=FastRetry.of(config),
            profile=config.profile,
            role=config.assumed_role,
            poll_threads=config.poll_threads,
            streams=tuple(
                StreamTarget(one.stream_name, one.stream_arn) for one in config.per_stream()
            ),
            record_timeout=config.task_timeout,
        )


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """One shard's part of a micro-batch: read ``limit`` records from ``position``, or
    (``position`` None) process the ``retries`` again."""

    task: int
    stream: str
    shard_id: str
    position: GetterPosition | None
    limit: int = 0
    retries: tuple[Record, ...] = ()
    closed: bool = False
    """ListShards says the shard is closed (a subscription then probes its end)."""
    fetch: str | None = None
    """Quarantine: read the shard's next record and fail it with this error, unprocessed."""

    @property
    def key(self) -> ShardKey:
        return (self.stream, self.shard_id)

    @property
    def is_retry(self) -> bool:
        return self.position is None

    @property
    def size(self) -> int:
        """The most user records the plan may yield: its limit, or its retries."""
        return len(self.retries) if self.position is None else self.limit


@dataclass(slots=True)
class ReadResult:
    """What a task returns for one plan: per record its key and status, the payloads of
    failed records only, the read's end as the bounded read left it, and the figures."""

    task: int
    stream: str
    shard_id: str
    end: ReadEnd | None = None
    """How the read ended (None: a retry plan)."""
    seqs: list[str] = field(default_factory=list)
    """Sequence number of each record, in shard order (retry plans: plan order)."""
    subs: list[int] = field(default_factory=list)
    ok: bytearray = field(default_factory=bytearray)
    """1 per record processed ok, 0 per failed record."""
    errors: dict[int, str] = field(default_factory=dict)
    failed: dict[int, Record] = field(default_factory=dict)
    """The payloads of the failed records, by index; their ``attempt`` is their last
    delivery (fast retries count)."""
    retried: int = 0
    """Extra deliveries made by fast retries."""
    poisoned: str | None = None
    """The record right after this read's end failed the task alone, with this error
    (it killed or hung the sandbox's child): its shard is quarantined."""
    executor: str = ""
    pid: int = 0
    seconds: float = 0.0
    """From the task's start to this result."""

    @classmethod
    def for_plan(cls, plan: ReadPlan, executor: str = "", pid: int = 0) -> ReadResult:
        """An empty result of ``plan``, read by ``executor``."""
        return cls(plan.task, plan.stream, plan.shard_id, executor=executor, pid=pid)

    @property
    def key(self) -> ShardKey:
        return (self.stream, self.shard_id)

    def __len__(self) -> int:
        return len(self.ok)

    def record_key(self, i: int) -> SequenceKey:
        return SequenceKey(int(self.seqs[i]), self.subs[i])

    def add(self, records: Iterable[Record]) -> None:
        """Records read, their statuses not known yet (ok until failed)."""
        for r in records:
            self.seqs.append(r.sequence_number)
            self.subs.append(r.sub_sequence_number)
            self.ok.append(1)


def sparse_marks(ok: bytearray, failed: Iterable[int]) -> list[tuple[int, bool]]:
    """The records of a read to track, in order, as ``(index, failed?)``: each failed
    record, the ok record just before it, and the last record if ok. With the others
    done, a tracker of just these has the checkpoint one of all of them has."""
    marks: list[tuple[int, bool]] = []
    marked = -1
    for i in sorted(failed):
        if i - 1 > marked and ok[i - 1]:
            marks.append((i - 1, False))
        marks.append((i, True))
        marked = i
    n = len(ok)
    if n and ok[n - 1] and n - 1 > marked:
        marks.append((n - 1, False))
    return marks


class Planner:
    """The micro-batches' plans over the reader, and their results applied (see the
    module docstring). The reader keeps its lifecycle (``open``, ``checkpoint``,
    ``close``)."""

    def __init__(self, spout: KinesisSpout, quarantine: Quarantine) -> None:
        self.spout = spout
        self.quarantine = quarantine
        self._tasks: Iterator[int] = itertools.count(1)
        self._fetching: dict[int, ShardKey] = {}
        """Fetch plans out, by task."""
        self.read_tasks = 0
        self.retry_tasks = 0
        self.readers: set[tuple[str, int]] = set()
        """(executor, pid) of every task whose result was applied."""

    def next_task(self) -> int:
        return next(self._tasks)

    # ------------------------------------------------------------------ planning
    def plan(self, max_records: int, busy: Collection[ShardKey] = ()) -> list[ReadPlan]:
        """The next micro-batch's plans (retry plans first) of the shards not ``busy``
        (in a running job); ``[]``: nothing to do now. Shards waiting at their tip join
        a micro-batch that runs anyway up to half their wait early, so idle shards poll
        together: one Spark job per round, not one per group."""
        spout = self.spout
        spout.check_open()
        now = spout.clock()
        spout.housekeep(now, held=busy)  # a running task's records do not expire under it
        if not spout.is_active or max_records <= 0:
            return []
        plans = [
            ReadPlan(self.next_task(), sh.stream, sh.shard_id, None, retries=tuple(retries))
            for sh, retries in spout.rotation.due_retries(max_records, now, skip=busy)
        ]
        planned = {p.key for p in plans}
        free = [
            sh
            for st in spout.streams.ordered()
            if st.active
            for sh in st.rotation
            if sh.key not in busy and sh.key not in planned
        ]
        early = bool(plans) or any(_readable(sh, now) for sh in free)
        for sh in free:
            if _readable(sh, now, early):
                plan = self._read_plan(sh, max_records, now)
                if plan is not None:
                    plans.append(plan)
        return plans

    def _read_plan(self, sh: ShardPartition, max_records: int, now: float) -> ReadPlan | None:
        assert sh.cursor is not None
        st = self.spout.streams.sets[sh.stream]
        info = st.map.get(sh.shard_id)
        closed = info is not None and info.is_closed
        position = sh.cursor.position
        task = self.next_task()
        suspect = self.quarantine.suspect(sh.key)
        if suspect is not None:  # read its next record to fail it, unprocessed
            self._fetching[task] = sh.key
            return ReadPlan(task, sh.stream, sh.shard_id, position, 1, closed=closed, fetch=suspect)
        cap = self.quarantine.cap(sh.key) or max_records
        limit = min(max_records, self.spout.make_room(sh, now), cap)
        if limit <= 0:
            return None
        return ReadPlan(task, sh.stream, sh.shard_id, position, limit, closed=closed)

    def chores_in(self) -> float:
        """Seconds until the reader's next checkpoint save: the driver's work while a
        micro-batch runs (a shard refresh waits for the next plan)."""
        return max(0.0, self.spout.next_checkpoint_at - self.spout.clock())

    def wake_in(self, busy: Collection[ShardKey] = ()) -> float:
        """Seconds until a plan may have a task (0: plan now); the shards ``busy`` (in a
        running job) cannot have one before that job is back, so their times do not count."""
        spout = self.spout
        spout.check_open()
        now = spout.clock()
        sets = spout.streams.ordered()
        t = min([spout.next_checkpoint_at, *(st.refresh_at for st in sets)])
        if any(st.to_adopt or any(sh.drained for sh in st.draining) for st in sets):
            return 0.0
        timeout = spout.config.message_timeout
        for sh in (sh for st in sets if st.active for sh in st.rotation):
            tracker, cursor = sh.tracker, sh.cursor
            if tracker is None or not sh.emitting:
                continue
            if tracker.in_flight and timeout:
                t = min(t, now + 1.0)
            if sh.key in busy:
                continue
            due = tracker.next_retry_at()
            if due is not None:
                t = min(t, due)
            if cursor is not None and sh.state is ShardState.OPEN and not sh.releasing:
                t = min(t, cursor.next_poll_at)
        return max(0.0, t - now)

    def settings(self, base: ReadSettings) -> ReadSettings:
        """``base`` with what the open streams add: each stream's ARN and, with
        ``consumer = "efo"``, its consumer's ARN (the tasks subscribe as it)."""
        targets = []
        for name, st in self.spout.streams.sets.items():
            consumer = st.getters.consumer if st.getters is not None else None
            arn = consumer.arn if consumer is not None else None
            targets.append(StreamTarget(name, st.config.stream_arn, arn))
        return replace(base, streams=tuple(targets))

    # ------------------------------------------------------------------ results
    def apply(self, results: Iterable[ReadResult]) -> tuple[int, int]:
        """Track the results of a micro-batch's tasks; (acked, failed) records."""
        spout = self.spout
        now = spout.clock()
        acked = failed = 0
        with spout.acks.deferred():
            for res in results:
                fetched = self._fetching.pop(res.task, None)
                a, f = self._apply_one(res, now)
                if fetched is not None and len(res):
                    self.quarantine.found(fetched)
                acked += a
                failed += f
        return acked, failed

    def _apply_one(self, res: ReadResult, now: float) -> tuple[int, int]:
        spout = self.spout
        st = spout.streams.sets.get(res.stream)
        sh = st.shards.get(res.shard_id) if st is not None else None
        if st is None or sh is None or sh.tracker is None:
            log.info("task %d: shard %s/%s was let go; result dropped", res.task, *res.key)
            return 0, 0
        self.readers.add((res.executor, res.pid))
        if res.retried:  # fast retries inside the task are retry deliveries too
            spout.metrics.increment("retries", res.retried, shard=sh.shard_id, stream=sh.stream)
        if res.end is None:
            self.retry_tasks += 1
            return self._apply_retries(sh, res, now)
        self.read_tasks += 1
        if res.end.failure is not None:
            self._read_failed(sh, res.end, now)
            return 0, 0
        return self._apply_read(st, sh, res, res.end, now)

    def _apply_retries(self, sh: ShardPartition, res: ReadResult, now: float) -> tuple[int, int]:
        tracker, acks = sh.tracker, self.spout.acks
        assert tracker is not None
        acked = sum(1 for i, ok in enumerate(res.ok) if ok and tracker.ack(res.record_key(i)))
        acks.count_acked(sh, acked)
        for i, rec in sorted(res.failed.items()):
            acks.fail_record(sh, rec.key, rec, res.errors.get(i), now)
        return acked, len(res.failed)

    def _apply_read(
        self, st: ShardSet, sh: ShardPartition, res: ReadResult, end: ReadEnd, now: float
    ) -> tuple[int, int]:
        """A read's statuses into the tracker, then its end into the core: what it said
        (lineage, lag, aggregates, end), where the shard's next read goes on, the window."""
        spout = self.spout
        tracker, acks = sh.tracker, spout.acks
        assert tracker is not None and sh.cursor is not None
        n = len(res)
        fails = []
        for i, is_failed in sparse_marks(res.ok, res.failed):
            if is_failed:
                rec = res.failed[i]
                if tracker.emitted(rec.key, rec, now):
                    fails.append((rec, res.errors.get(i)))
            elif tracker.emitted(key := res.record_key(i), None, now):
                tracker.ack(key)
        if n:
            sh.window.add_run(res.record_key(n - 1), n)
            spout.rotation.read += n
            spout.metrics.increment("records_read", n, shard=sh.shard_id, stream=sh.stream)
        acks.count_acked(sh, n - len(fails))
        for rec, error in fails:
            acks.fail_record(sh, rec.key, rec, error, now)
        st.apply_end(sh, end)
        sh.cursor.advance(end, now)
        if sh.skip_tail is not None:
            sh.pass_skipped(now)
        self.quarantine.read(sh.key, n, end.caught_up)
        if res.poisoned is not None:
            self.quarantine.quarantine(sh.key, res.poisoned)
        return n - len(fails), len(fails)

    # ------------------------------------------------------------------ quarantine
    def fail_alone(self, plan: ReadPlan, error: str) -> list[str]:
        """A plan of one record failed a task alone (poison); the message ids failed now.
        A retry plan's records fail at once; a read plan's record never reached the
        driver: its shard is quarantined, its next plan fetches the record to fail it."""
        sh = self.spout.streams.find(plan.stream, plan.shard_id)
        if sh is None or sh.tracker is None:
            return []
        if plan.is_retry:
            now = self.spout.clock()
            for rec in plan.retries:
                self.spout.acks.fail_record(sh, rec.key, rec, error, now)
            return [rec.stream_message_id for rec in plan.retries]
        self.quarantine.quarantine(plan.key, error)
        return []

    def hung(self, plan: ReadPlan, error: str) -> list[str]:
        """A job of this one plan was given up at ``task_timeout``; the message ids failed
        now. A retry plan's record fails; a read plan's next reads are halved until the
        record that hangs is found (then quarantined)."""
        if plan.is_retry:
            return self.fail_alone(plan, error)
        self.quarantine.hung(plan.key, plan.limit, error)
        return []

    def _read_failed(self, sh: ShardPartition, end: ReadEnd, now: float) -> None:
        """A read that failed as a read: a stream gone is let go (its only stream: the
        error stops the job); anything else pauses the shard with a growing backoff."""
        assert sh.cursor is not None
        if end.failure_kind in ("StreamNotFoundError", "StreamRecreatedError"):
            self.spout.streams.failed(sh.stream, StreamNotFoundError(end.failure or ""))
            return
        if end.failure_kind == "InvalidPositionError":  # a checkpoint Kinesis refuses: a human
            raise InvalidPositionError(end.failure or "")
        wait = sh.cursor.failed(now)
        self.spout.metrics.increment("read_failures", shard=sh.shard_id, stream=sh.stream)
        log.warning(
            "shard %s/%s: its read failed (%s); it reads again in %.1fs, the other shards go on",
            sh.stream,
            sh.shard_id,
            end.failure,
            wait,
        )


def _readable(sh: ShardPartition, now: float, early: bool = False) -> bool:
    """The shard may be read now (``early``: or within its early margin)."""
    cursor = sh.cursor
    return (
        sh.state is ShardState.OPEN
        and cursor is not None
        and sh.tracker is not None
        and sh.emitting
        and not sh.releasing
        and cursor.due(now, early)
    )
