"""Executor reads, the driver's side: the records that failed a task alone.

A task of one record that killed its Python worker, or on which the user's function
hung past ``task_timeout``, returned nothing: not even the record. :class:`LoneRecords`
reads that record on the driver (:func:`~kinesis_spout.spark.read.alone.read_alone`)
and fails it in its tracker, so that it is retried and, after ``retry_limit`` retries,
dead-lettered, while its shard reads on after it. It also keeps the searches for a
record that hangs (:class:`~kinesis_spout.spark.read.hangs.HangSearch`: the shard's
reads halved until a read of one record hangs).

When the driver's read does not reach the record (behind more empty pages than one
read walks, or after errors), the shard is *walking*: it has no read task, which
would fail or hang on the record again, and :meth:`LoneRecords.walk` reads on from
where the last read stopped at each step of the micro-batch loop until it reaches the
record. For a record that hangs this matters most: a task of it costs
``task_timeout``, longer than the iterator the last read reached stays valid, so each
read after a new hang walked the same pages again and never reached the record.

The planner (:class:`~kinesis_spout.spark.read.planner.ExecutorReadPlanner`) asks it
for a shard's read cap and its walking shards when planning, and hands it each read
applied; the read that fails the record is applied through the planner, as a task's is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass

from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.records import Record, ShardBatch, ShardState
from kinesis_spout.spark.read import alone
from kinesis_spout.spark.read.alone import keep_reached, read_alone
from kinesis_spout.spark.read.hangs import HangSearch
from kinesis_spout.spark.read.plan import ReadPlan, ReadResult
from kinesis_spout.spout import KinesisSpout

log = logging.getLogger(__name__)

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
        """Shards whose record that failed a task alone the driver has not reached yet, in
        the order they walk: the driver reads on to it at each step (:meth:`walk`)."""

    def hung(self, plan: ReadPlan, error: str) -> list[str]:
        """A job of this one plan was given up at ``task_timeout``; the message ids failed.
        A retry task's records fail (the loop halves one of several records first). A
        read task's shard is read again from the same position, its reads halved until
        the record that hangs is found and failed alone (:mod:`~kinesis_spout.spark.read.hangs`)."""
        if not plan.is_retry and not self.hangs.hung(plan.shard_id, plan.limit):
            return []
        failed = self._fail(plan, _Walk(error, hung=True))
        if not plan.is_retry:
            if failed:  # found and failed: full-size reads again
                self.hangs.found(plan.shard_id)
            elif plan.shard_id not in self.walks:  # the next read is of that record again
                self.hangs.unread(plan.shard_id)
        return failed

    def walk(self, busy: Collection[str] = ()) -> list[str]:
        """Read on, on the driver, to each record that failed a task alone and that the
        last read did not reach, from where that read stopped, and fail it; the message
        ids failed. Shards that may not read now (:meth:`_may_walk`) wait for a later step.
        The loop waits for these reads, so a step starts none past ``alone.SECONDS`` (the
        bound of one read), and the shards take turns."""
        failed: list[str] = []
        deadline = self._clock() + alone.SECONDS
        for shard_id, walk in list(self.walks.items()):
            sh = self._set.shards.get(shard_id)
            reader = sh.reader if sh is not None else None
            if sh is None or reader is None or sh.state is not ShardState.OPEN:
                del self.walks[shard_id]  # let go or ended: read again where it goes
                continue
            if shard_id in busy or not self._may_walk(sh) or self._clock() > deadline:
                continue
            plan = ReadPlan(self._next_task(), shard_id, reader.getter.position, 1)
            ids = self._fail(plan, walk)
            if ids and walk.hung:
                self.hangs.found(shard_id)
            if shard_id in self.walks:  # still walking: behind the others next step
                self.walks[shard_id] = self.walks.pop(shard_id)
            failed += ids
        return failed

    def walking(self, busy: Collection[str] = ()) -> bool:
        """Whether a shard not ``busy`` may walk now (the loop's next step is due)."""
        return any(
            shard_id not in busy
            and (sh := self._set.shards.get(shard_id)) is not None
            and self._may_walk(sh)
            for shard_id in self.walks
        )

    @staticmethod
    def _may_walk(sh: ShardPartition) -> bool:
        """A shard reads on to its record only while it may read at all: not fenced, with
        no dead letter waiting to be written, not being let go."""
        return sh.emitting and not sh.releasing

    def fail_alone(self, plan: ReadPlan, error: str) -> list[str]:
        """Fail what a task of one record failed on alone (poison); the message ids failed.

        A retry task's records are failed; a read task of limit 1 has its record read
        here (:func:`read_alone`) and failed, or, when the read does not reach it, its
        shard walks to it (:meth:`walk`).
        """
        return self._fail(plan, _Walk(error, hung=False))

    def _fail(self, plan: ReadPlan, walk: _Walk) -> list[str]:
        """:meth:`fail_alone`, the shard walking with ``walk`` when the record is not
        reached."""
        error = walk.error
        sh = self._set.shards.get(plan.shard_id)
        if sh is None or sh.tracker is None:
            return []
        now = self._clock()
        if plan.position is None:
            for rec in plan.retries:
                self._acks.fail_record(sh, rec.key, rec, error, now)
            return [poison_id(rec) for rec in plan.retries]
        spout = self.spout
        assert spout.api is not None
        getter, page = read_alone(
            spout.api, plan, spout.throttle_backoff, sleep=spout.sleep, clock=self._clock
        )
        if not page.records:
            self._not_read_alone(sh, plan, getter, page)
            if page.ended:  # the shard ended before it: nothing to walk to
                self.walks.pop(plan.shard_id, None)
            else:  # not reached now: the next step reads on (:meth:`walk`)
                self.walks[plan.shard_id] = walk
            return []
        self.walks.pop(plan.shard_id, None)
        self._apply_read(sh, _failed_read(plan, getter, page, error), now)
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
