"""Executor reads, the driver's side: plan the read tasks, track what came back.

:class:`ExecutorReadPlanner` holds a :class:`~kinesis_spout.spout.KinesisSpout`
(:func:`executor_read_spout`) whose records are read by Spark tasks
(:mod:`kinesis_spout.spark.read.task`) instead of by itself. The spout keeps
everything else: shard lifecycle and resharding (parents drained before
children), ownership, trackers, retry limit, dead letters (write-ahead),
checkpoints and their store.

Per micro-batch :meth:`plan` makes (the loop groups them into Spark tasks)

* one *retry plan* per shard with due retries (the failed payloads it keeps),
  before any new read, and
* one *read plan* per readable shard: its position (the shard's next iterator,
  else after the last key read, else its initial position) and a record limit
  in user records: the smaller of ``batch_size`` and the room in the shard's replay window
  (``max_in_flight`` records read since its saved checkpoint; a window half
  savable saves early (:meth:`~kinesis_spout.spout.KinesisSpout.make_room`, as the
  local loop does); one more while the checkpoint waits on
  the next record of a KPL aggregate, see
  :meth:`~kinesis_spout.core.partition.ShardPartition.room`), and while its reads hang,
  the cap of its search for the record that hangs (:meth:`hung`,
  :mod:`~kinesis_spout.spark.read.hangs`). A draining, released, fenced or
  ended shard gets no read task, nor one walking to a record that failed a task alone
  (:mod:`~kinesis_spout.spark.read.lone`); a caught-up shard waits ``empty_shard_backoff``.

:meth:`apply` takes the results. The payloads of records that were processed
ok never come here: a read task's records are tracked *sparsely*: each failed
record (with its payload, for its retries), the record just before it and the
last record, so the tracker's checkpoint is exactly what it would be with
every key (the untracked keys between them are done). Failed records are
failed in their tracker: retried in a later retry task, or dead-lettered
after ``retry_limit`` retries. A record that failed a task alone (:meth:`fail_alone`,
:meth:`hung`, :meth:`walk`) is failed the same way, once the driver has read it
(:class:`~kinesis_spout.spark.read.lone.LoneRecords`).

Planning and applying are one class because each reads what the other leaves in the
same shard state: the room, the positions, the retries and the hang searches that
applied results change are what the next plan is made of.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Collection, Iterable, Iterator
from typing import Any

from kinesis_spout.config import SpoutConfig
from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.multistream import MultiStreamSpout, open_reader
from kinesis_spout.records import ShardBatch, ShardState
from kinesis_spout.spark.read.lone import LoneRecords
from kinesis_spout.spark.read.plan import ReadPlan, ReadResult
from kinesis_spout.spout import KinesisSpout

log = logging.getLogger(__name__)


def sparse_marks(ok: bytearray, failed: Iterable[int]) -> list[tuple[int, bool]]:
    """The records of a read to track, in order, as ``(index, failed?)``: each failed
    record, the ok record just before it, and the last record if ok. With the
    others done, a tracker of just these has the checkpoint one of all of them has."""
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


def count_task_figures(metrics: MetricsCollector, shard_id: str, res: ReadResult) -> None:
    """What a read task measured on its executor, into the driver's metrics."""
    for seconds in res.call_seconds:
        metrics.observe("get_records_seconds", seconds, shard=shard_id)
    if res.throttled:
        metrics.increment("kinesis_throttled", res.throttled, shard=shard_id)
    if res.expired:
        metrics.increment("iterators_expired", res.expired, shard=shard_id)
    if res.transient:
        metrics.increment("kinesis_errors", res.transient, shard=shard_id)


def executor_read_spout(config: SpoutConfig, **kwargs: Any) -> KinesisSpout | MultiStreamSpout:
    """The reader whose shards Spark tasks read (of one stream, or of several): it keeps
    positions, trackers and checkpoints, and does not subscribe itself (``consumer =
    "efo"``: the tasks do). ``kwargs`` go to :func:`~kinesis_spout.multistream.open_reader`."""
    return open_reader(config, subscribe=False, reader="ExecutorReadPlanner", **kwargs)


class ExecutorReadPlanner:
    """The driver's side of executor reads over the spout it holds; see the module
    docstring. The spout keeps its lifecycle (``open``, ``checkpoint``, ``close``);
    the planner plans through its public face (the shard set, the ack router, the
    round robin, housekeeping and saves)."""

    def __init__(self, spout: KinesisSpout) -> None:
        self.spout = spout
        self.config = spout.config
        self._set = spout.shard_set
        self._acks = spout.acks
        self._rr = spout.rotation
        self._metrics = spout.metrics
        self._clock = spout.clock
        self._early: dict[str, float] = {}
        """Per shard waiting at its tip: how early it may join a micro-batch."""
        self.tasks: Iterator[int] = itertools.count(1)
        """Numbers of the tasks planned (shared by the planners of a job's streams, so a
        number names one plan of the job)."""
        self.read_tasks = 0
        self.retry_tasks = 0
        self.readers: set[tuple[str, int]] = set()
        """(executor, pid) of every task whose result was applied."""
        self.lone = LoneRecords(spout, self._apply_read, self._next_task)
        """The records that failed a task alone: read and failed on the driver, and the
        searches for a record that hangs (:meth:`fail_alone`, :meth:`hung`, :meth:`walk`)."""

    # ------------------------------------------------------------------ planning
    def plan(
        self, max_records: int, busy: Collection[str] = (), early: bool = False
    ) -> list[ReadPlan]:
        """The next tasks (retry tasks first) of the shards not ``busy`` (with a task
        running); ``[]``: nothing to do now. ``early``: a micro-batch runs anyway (another
        stream of the job has plans), so shards waiting at their tip may join it early."""
        self.spout.check_open()
        now = self._clock()
        self._rr.held = busy  # a running retry task's records do not expire under it
        self.spout.housekeep(now)
        if not self.spout.is_active or max_records <= 0:
            return []
        plans = [
            ReadPlan(self._next_task(), sh.shard_id, None, retries=tuple(retries))
            for sh, retries in self._rr.due_retries(max_records, now, skip=busy)
        ]
        rotation = list(self._set.rotation)
        planned = {p.shard_id for p in plans}
        # A walking shard has no read task: it would fail or hang on the same record again.
        skip = {*busy, *planned, *self.lone.walks}
        free = [sh for sh in rotation if sh.shard_id not in skip]
        # Shards waiting at their tip join a micro-batch that runs anyway up to half their
        # wait early, so idle shards that fell out of step (a read cut by the deadline) poll
        # together again: one Spark job per round, not one per group.
        early = early or bool(plans) or any(self._readable(sh, now) for sh in free)
        for sh in free:
            if self._readable(sh, now, early):
                cap = self.lone.hangs.cap(sh.shard_id) or max_records
                limit = min(max_records, self.spout.make_room(sh, now), cap)
                if limit > 0:
                    assert sh.reader is not None
                    position = sh.reader.getter.position
                    info = self._set.map.get(sh.shard_id)
                    closed = info is not None and info.is_closed
                    plans.append(
                        ReadPlan(self._next_task(), sh.shard_id, position, limit, closed=closed)
                    )
        return plans

    @property
    def consumer_arn(self) -> str | None:
        """The ARN of the enhanced fan-out consumer (``consumer = "efo"``, once open)."""
        getters = self._set.getters
        consumer = getters.consumer if getters is not None else None
        return consumer.arn if consumer is not None else None

    def _next_task(self) -> int:
        return next(self.tasks)

    def _readable(self, sh: ShardPartition, now: float, early: bool = False) -> bool:
        """The shard may read now (``early``: or within its early margin)."""
        reader = sh.reader
        return (
            sh.state is ShardState.OPEN
            and reader is not None
            and sh.tracker is not None
            and sh.emitting
            and not sh.releasing
            and reader.getter.due(now + (self._early.get(sh.shard_id, 0.0) if early else 0.0))
        )

    def chores_in(self) -> float:
        """Seconds until the spout's next checkpoint save: the driver's work while a
        micro-batch runs (a shard refresh waits for the next plan, :meth:`plan`)."""
        return max(0.0, self.spout.next_checkpoint_at - self._clock())

    def wake_in(self, busy: Collection[str] = ()) -> float:
        """Seconds until a plan may have a task (0: plan now); the shards ``busy`` (in a
        running job) cannot have one before that job is back, so their times do not count."""
        self.spout.check_open()
        now = self._clock()
        t = min(self.spout.next_checkpoint_at, self._set.refresh_at)
        if self._set.to_adopt or any(sh.drained for sh in self._set.draining):
            return 0.0
        if self.lone.walking(busy):
            return 0.0
        for sh in self._set.rotation:
            tracker, reader = sh.tracker, sh.reader
            if tracker is None or not sh.emitting:
                continue
            if sh.shard_id in busy:
                if tracker.in_flight and self.config.message_timeout:
                    t = min(t, now + 1.0)
                continue
            due = tracker.next_retry_at()
            if due is not None:
                t = min(t, due)
            if reader is not None and sh.state is ShardState.OPEN and not sh.releasing:
                t = min(t, reader.getter.next_poll_at)
            if tracker.in_flight and self.config.message_timeout:
                t = min(t, now + 1.0)
        return max(0.0, t - now)

    # ------------------------------------------------------------------ results
    def apply(self, results: Iterable[ReadResult]) -> tuple[int, int]:
        """Track the results of a micro-batch's tasks; (acked, failed) records."""
        now = self._clock()
        acked = failed = 0
        with self._acks.deferred():
            for res in results:
                a, f = self._apply_one(res, now)
                acked += a
                failed += f
        return acked, failed

    def _apply_one(self, res: ReadResult, now: float) -> tuple[int, int]:
        sh = self._set.shards.get(res.shard_id)
        if sh is None or sh.tracker is None:
            log.info("task %d: shard %s was released; result dropped", res.task, res.shard_id)
            return 0, 0
        self.readers.add((res.executor, res.pid))
        if res.retried:  # fast retries inside the task are retry deliveries too
            self._metrics.increment("retries", res.retried, shard=sh.shard_id)
        if res.position is None:
            self.retry_tasks += 1
            return self._apply_retries(sh, res, now)
        self.read_tasks += 1
        return self._apply_read(sh, res, now)

    def _apply_retries(self, sh: ShardPartition, res: ReadResult, now: float) -> tuple[int, int]:
        tracker = sh.tracker
        assert tracker is not None
        acked = 0
        for i, ok in enumerate(res.ok):
            if ok and tracker.ack(res.key(i)):
                acked += 1
        self._acks.count_acked(sh.shard_id, acked)
        for i, rec in sorted(res.failed.items()):
            self._acks.fail_record(sh, rec.key, rec, res.errors.get(i), now)
        return acked, len(res.failed)

    def _apply_read(self, sh: ShardPartition, res: ReadResult, now: float) -> tuple[int, int]:
        tracker = sh.tracker
        assert tracker is not None and sh.reader is not None and res.position is not None
        n = len(res)
        emitted = tracker.emitted
        fails = []
        for i, is_failed in sparse_marks(res.ok, res.failed):
            if is_failed:
                rec = res.failed[i]
                if emitted(rec.key, rec, now):
                    fails.append((rec, res.errors.get(i)))
            else:
                key = res.key(i)
                if emitted(key, None, now):
                    tracker.ack(key)
        self.lone.hangs.read(sh.shard_id, n, res.caught_up)
        if n:
            sh.window.add_run(res.key(n - 1), n)
            self._rr.read += n
            self._metrics.increment("records_read", n, shard=sh.shard_id)
        acked = n - len(fails)
        self._acks.count_acked(sh.shard_id, acked)
        for rec, error in fails:
            self._acks.fail_record(sh, rec.key, rec, error, now)
        self._take_end(sh, res, now)
        return acked, len(fails)

    def _take_end(self, sh: ShardPartition, res: ReadResult, now: float) -> None:
        """The read's end: position, lag, lineage, odd aggregates, errors."""
        assert sh.reader is not None and res.position is not None
        cfg = self.config
        getter = sh.reader.getter
        assert isinstance(getter, KinesisShardGetter)  # the driver only keeps positions
        self._early.pop(sh.shard_id, None)
        if res.ended:
            wait = math.inf
        elif len(res) == 0 and res.throttled:
            wait = now + cfg.throttle_backoff
        elif res.caught_up:
            idle = getter.idle_wait(len(res))
            wait = now + idle
            self._early[sh.shard_id] = idle / 2  # see plan()
        else:
            wait = now
            if len(res) or res.skipped or res.corrupt:
                getter.records_answered()  # stopped at its limit or deadline, records read
        getter.advance(
            res.position,
            ended=res.ended,
            behind=res.behind,
            caught_up=res.caught_up,
            next_poll_at=wait,
        )
        page = ShardBatch(
            [],
            wait,
            ended=res.ended,
            called=res.calls > 0,
            millis_behind_latest=res.behind,
            child_shards=res.child_shards,
            aggregates=res.aggregates,
            skipped=res.skipped,
            skipped_tail=res.skipped_tail,
            corrupt_aggregates=res.corrupt,
        )
        self._set.on_batch(sh, page)
        if sh.skip_tail is not None:
            sh.pass_skipped(now)
        count_task_figures(self._metrics, sh.shard_id, res)

    # ------------------------------------------------------------------ isolation
    def fail_alone(self, plan: ReadPlan, error: str) -> list[str]:
        """See :meth:`~kinesis_spout.spark.read.lone.LoneRecords.fail_alone`."""
        return self.lone.fail_alone(plan, error)

    def hung(self, plan: ReadPlan, error: str) -> list[str]:
        """See :meth:`~kinesis_spout.spark.read.lone.LoneRecords.hung`."""
        return self.lone.hung(plan, error)

    def walk(self, busy: Collection[str] = ()) -> list[str]:
        """See :meth:`~kinesis_spout.spark.read.lone.LoneRecords.walk`."""
        return self.lone.walk(busy)
