"""Executor reads, the driver's side: the records that failed a task alone.

A task of one record that killed its Python worker, or on which the user's function
hung past ``task_timeout``, returned nothing: not even the record. :class:`LoneRecords`
reads that record on the driver (:func:`~kinesis_spout.spark.read.alone.read_alone`)
and fails it in its tracker, so that it is retried and, after ``retry_limit`` retries,
dead-lettered, while its shard reads on after it. It also keeps the searches for a
record that hangs (:class:`~kinesis_spout.spark.read.hangs.HangSearch`: the shard's
reads halved until a read of one record hangs).

From the moment its task failed alone until the driver has read and failed the record,
the shard is *walking*: it has no read task, which would fail or hang on the record
again, and :meth:`LoneRecords.walk` reads from the task's position, then on from where
the last read stopped (the record may sit behind more empty pages than one read walks,
or a read may end in errors) until it reaches the record, one read at a time on a thread
of its own, which the micro-batch loop starts and applies at its steps but never waits
for: a read may take up to 15 s, and the other shards' micro-batches go on meanwhile.
For a record that hangs the walk matters most: a task of it costs ``task_timeout``,
longer than the iterator the last read reached stays valid, so each read after a new
hang walked the same pages again and never reached the record.

The planner (:class:`~kinesis_spout.spark.read.planner.ExecutorReadPlanner`) asks it
for a shard's read cap and its walking shards when planning, and hands it each read
applied; the read that fails the record is applied through the planner, as a task's is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from concurrent.futures import Future
from dataclasses import dataclass

from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.records import Record, ShardBatch, ShardState
from kinesis_spout.spark.read.alone import keep_reached, read_alone
from kinesis_spout.spark.read.hangs import HangSearch
from kinesis_spout.spark.read.plan import ReadPlan, ReadResult
from kinesis_spout.spout import KinesisSpout

log = logging.getLogger(__name__)

_Read = tuple[KinesisShardGetter, ShardBatch]
"""A driver's read of one record: its getter (where it stopped) and its page."""

ApplyRead = Callable[[ShardPartition, ReadResult, float], tuple[int, int]]
"""How a read's result is tracked (the planner's, for a task's read and the driver's)."""


def poison_id(record: Record) -> str:
    """How a record that failed alone is remembered: ``"<stream>/<message id>"`` (a job
    may read several streams)."""
    return f"{record.stream_name}/{record.message_id}"


@dataclass(frozen=True, slots=True)
class _Walk:
    """A record the driver reads on to: the error to fail it with, and whether it hung
    (its shard's hang search ends once it is failed)."""

    error: str
    hung: bool


class LoneRecords:
    """The records that failed a task alone, read and failed on the driver; see the
    module docstring."""

    def __init__(self, spout: KinesisSpout, apply_read: ApplyRead, next_task: Callable[[], int]):
        self.spout = spout
        self._set = spout.shard_set
        self._acks = spout.acks
        self._metrics = spout.metrics
        self._clock = spout.clock
        self._apply_read = apply_read
        self._next_task = next_task
        self.hangs = HangSearch()
        """Shards whose reads hung: their reads are halved to find the record (:meth:`hung`)."""
        self.walks: dict[str, _Walk] = {}
        """Shards whose record that failed a task alone the driver has not reached yet: the
        driver reads on to it (:meth:`walk`)."""
        self._reading: dict[str, tuple[ReadPlan, Future[_Read]]] = {}
        """The walks' reads that run, by shard."""

    def hung(self, plan: ReadPlan, error: str) -> list[str]:
        """A job of this one plan was given up at ``task_timeout``; the message ids failed
        now. A retry task's records fail (the loop halves one of several records first).
        A read task's shard is read again from the same position, its reads halved until
        the record that hangs is found (:mod:`~kinesis_spout.spark.read.hangs`); the shard
        then walks to it, as in :meth:`fail_alone`, and once it is failed reads at full
        size again (:meth:`_walked`)."""
        if not plan.is_retry and not self.hangs.hung(plan.shard_id, plan.limit):
            return []
        failed = self._fail(plan, _Walk(error, hung=True))
        if not plan.is_retry and plan.shard_id not in self.walks:
            self.hangs.unread(plan.shard_id)  # let go meanwhile: its next read is of it again
        return failed

    def walk(self, busy: Collection[str] = ()) -> list[str]:
        """Read, on the driver, to each record that failed a task alone, from the task's
        position or from where the last read stopped, and fail it; the message ids
        failed. The reads run on threads of their own (one per shard at a time), so
        the micro-batch loop never waits for them: each call applies the reads that
        finished (a shard that is still walking reads on at the next call) and starts one
        for each walking shard that may read now (:meth:`_may_walk`) and has none running."""
        failed: list[str] = []
        for shard_id, walk in list(self.walks.items()):
            sh = self._set.shards.get(shard_id)
            reader = sh.reader if sh is not None else None
            if sh is None or reader is None or sh.state is not ShardState.OPEN:
                del self.walks[shard_id]  # let go or ended: read again where it goes
                self._reading.pop(shard_id, None)  # what it reads is not applied
                continue
            if shard_id in busy:  # a retry task of it runs: its read waits, none starts
                continue
            running = self._reading.get(shard_id)
            if running is not None:
                if running[1].done():
                    del self._reading[shard_id]
                    failed += self._walked(sh, walk, *running)
                continue
            if not self._may_walk(sh):
                continue
            plan = ReadPlan(self._next_task(), shard_id, reader.getter.position, 1)
            self._reading[shard_id] = (plan, self._start(plan))
        return failed

    def _walked(
        self, sh: ShardPartition, walk: _Walk, plan: ReadPlan, read: Future[_Read]
    ) -> list[str]:
        """A walk's read that finished, applied unless its shard may not read now or moved
        meanwhile (then it reads again from where it is); the message ids failed."""
        getter, page = read.result()  # an error that needs a human is raised here
        assert sh.reader is not None
        if not self._may_walk(sh) or sh.reader.getter.position != plan.position:
            return []
        ids = self._settle(sh, plan, walk, getter, page)
        if ids and walk.hung:
            self.hangs.found(sh.shard_id)
        return ids

    def walking(self, busy: Collection[str] = ()) -> bool:
        """Whether the loop's next step is due for a walk: a walk's read finished, or a
        walking shard not ``busy`` may start one."""
        for shard_id in self.walks:
            if shard_id in busy:
                continue
            running = self._reading.get(shard_id)
            if running is not None:
                if running[1].done():
                    return True
                continue
            sh = self._set.shards.get(shard_id)
            if sh is not None and self._may_walk(sh):
                return True
        return False

    @property
    def reading(self) -> bool:
        """Whether a walk's read runs (the loop looks again within ``MAX_WAIT``)."""
        return bool(self._reading)

    def _start(self, plan: ReadPlan) -> Future[_Read]:
        """A walk's read on a thread of its own (a daemon: a job that stops does not wait
        for it, and what it read is not applied); once the spout stops emitting or is
        closed it makes no more calls (:meth:`_read`)."""
        read: Future[_Read] = Future()

        def run() -> None:
            if not read.set_running_or_notify_cancel():
                return
            try:
                read.set_result(self._read(plan))
            except BaseException as exc:  # raised where the loop applies it
                read.set_exception(exc)

        name = f"kinesis-spout-walk-{plan.shard_id}"
        threading.Thread(target=run, name=name, daemon=True).start()
        return read

    @staticmethod
    def _may_walk(sh: ShardPartition) -> bool:
        """A shard reads on to its record only while it may read at all: not fenced, with
        no dead letter waiting to be written, not being let go."""
        return sh.emitting and not sh.releasing

    def fail_alone(self, plan: ReadPlan, error: str) -> list[str]:
        """Fail what a task of one record failed on alone (poison); the message ids failed
        now.

        A retry task's records are failed at once. A read task's record is not here (the
        task returned nothing): its shard *walks* to it (:meth:`walk`), the driver's
        reads starting at the next step of the loop, on a thread of their own, so no
        other shard's micro-batch waits for them (one read may take up to
        :data:`~kinesis_spout.spark.read.alone.SECONDS`).
        """
        return self._fail(plan, _Walk(error, hung=False))

    def _fail(self, plan: ReadPlan, walk: _Walk) -> list[str]:
        """:meth:`fail_alone`: a retry plan's records failed, a read plan's shard walking
        with ``walk`` (from the plan's position: the task's read was not applied)."""
        sh = self._set.shards.get(plan.shard_id)
        if sh is None or sh.tracker is None:
            return []
        if plan.position is None:
            now = self._clock()
            for rec in plan.retries:
                self._acks.fail_record(sh, rec.key, rec, walk.error, now)
            return [poison_id(rec) for rec in plan.retries]
        self.walks[plan.shard_id] = walk
        return []

    def _read(self, plan: ReadPlan) -> _Read:
        """The driver's read of the record of ``plan`` (:func:`read_alone`): I/O only, so
        a walk runs it on a thread of its own. It ends at its next call once the spout
        stops emitting (the job stops) or is closed."""
        spout = self.spout
        assert spout.api is not None
        return read_alone(
            spout.api,
            plan,
            spout.throttle_backoff,
            sleep=spout.sleep,
            clock=self._clock,
            stopped=lambda: spout.closed or not spout.is_active,
        )

    def _settle(
        self,
        sh: ShardPartition,
        plan: ReadPlan,
        walk: _Walk,
        getter: KinesisShardGetter,
        page: ShardBatch,
    ) -> list[str]:
        """The driver's read applied: its record failed with the walk's error, or, not
        reached, the shard walking on from where the read stopped."""
        if sh.tracker is None:
            return []
        if not page.records:
            self._not_read_alone(sh, plan, getter, page)
            if page.ended:  # the shard ended before it: nothing to walk to
                self.walks.pop(plan.shard_id, None)
            else:  # not reached now: the next step reads on (:meth:`walk`)
                self.walks[plan.shard_id] = walk
            return []
        self.walks.pop(plan.shard_id, None)
        self._apply_read(sh, _failed_read(plan, getter, page, walk.error), self._clock())
        return [poison_id(rec) for rec in page.records]

    def _not_read_alone(
        self, sh: ShardPartition, plan: ReadPlan, getter: KinesisShardGetter, page: ShardBatch
    ) -> None:
        """The record that fails alone was not reached now: the shard's position keeps
        what the read reached (:func:`keep_reached`), and the error is shown."""
        assert sh.reader is not None
        driver_getter = sh.reader.getter
        assert isinstance(driver_getter, KinesisShardGetter)
        keep_reached(driver_getter, plan, getter)
        self._metrics.increment("kinesis_errors", getter.errors, shard=sh.shard_id)
        log.warning(
            "shard %s: the record that fails alone could not be read (%d calls): %s; "
            "reading on to it at the next step",
            sh.shard_id,
            getter.calls,
            page.error or "not reached yet",
        )


def _failed_read(
    plan: ReadPlan, getter: KinesisShardGetter, page: ShardBatch, error: str
) -> ReadResult:
    """The driver's read of the record that failed alone as a task's result: each of
    its records failed with ``error``."""
    res = ReadResult.for_plan(plan)
    res.position, res.calls = getter.position, getter.calls
    res.call_seconds = [page.seconds] if page.seconds is not None else []
    for i, rec in enumerate(page.records):
        res.seqs.append(rec.sequence_number)
        res.subs.append(rec.sub_sequence_number)
        res.ok.append(0)
        res.errors[i] = error
        res.failed[i] = rec
    res.ended, res.behind = getter.ended, getter.millis_behind_latest
    res.caught_up = getter.caught_up
    res.child_shards, res.aggregates = page.child_shards, page.aggregates
    return res
