"""A micro-batch's plans as one Spark job, and cutting down a job that fails.

One job per call: the plans in :meth:`ReadJobs.tasks_for` partitions, each a read task
on an executor, ``collect`` of the results (Spark keeps one per partition, so a task it
ran again is counted once). The per-record style runs in its tasks' sandboxes; the
DataFrame styles through :mod:`.frames`; ``process_partitions`` through :mod:`.shuffle`.
A job that fails as a whole is cut (:data:`PLANS`, :mod:`~kinesis_spout.spark.isolation`):
plan by plan, then a read plan halved (reading on from where a good half stopped) and a
retry plan halved, down to one record, judged poison or a systematic error.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kinesis_spout.spark.isolation import (
    Cut,
    Isolation,
    PoisonJudge,
    Wording,
    run_split,
    split_budget,
)
from kinesis_spout.spark.plan import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.process.arrow import format_error
from kinesis_spout.spark.process.styles import RecordFunction
from kinesis_spout.spark.read.followup import follow_up
from kinesis_spout.spark.read.shuffle import shuffled_results
from kinesis_spout.spark.sandbox import task_function

if TYPE_CHECKING:
    from kinesis_spout.spark.read.frames import FrameJobs

log = logging.getLogger(__name__)


ReadIsolation = Isolation[ReadPlan]
"""Book-keeping of one micro-batch's re-runs after failed jobs (what fails alone: read
plans of one record)."""

TASK_WORDS = Wording(
    lone="tasks of one record",
    left="nothing was failed and the unfinished records come back after a restart",
    over="tasks fail it",
    runs="re-runs",
)


class ReadJobs:
    """Runs read plans on a SparkSession; see the module docstring."""

    def __init__(
        self,
        spark: Any,
        fn: RecordFunction,
        settings: ReadSettings,
        *,
        process_partitions: int = 0,
        shards_per_task: int = 0,
        stopping: Callable[[], bool] = lambda: False,
        frames: FrameJobs | None = None,
    ) -> None:
        self.spark = spark
        self.frames = frames
        """The DataFrame styles (a transform, a fan-out): their jobs (None: ``fn`` per record)."""
        self.shards_per_task = shards_per_task
        """Plans per read task; 0: spread the plans over the cluster's cores."""
        self.run_id = uuid.uuid4().hex[:8]
        self.jobs_run = 0
        """Spark jobs started (read jobs, their re-runs and probes)."""
        self.fn = fn
        self.settings = settings
        self.process_partitions = process_partitions
        self.stopping = stopping
        self.poison_judge = PoisonJudge(TASK_WORDS)
        """Lone failures across micro-batches, and whether the last job ran."""
        self.cancelled: set[int] = set()
        """Tasks (batch ids) given up by the driver: their jobs are not run again."""

    def run(self, batch_id: int, plans: list[ReadPlan]) -> tuple[list[ReadResult], ReadIsolation]:
        """The results of the plans (re-run and split after failed jobs)."""
        weight = sum(max(p.limit, len(p.retries)) for p in plans)
        iso: ReadIsolation = Isolation(splits_left=split_budget(weight))
        results = run_split(
            lambda part: self.collect(batch_id, part),
            PLANS,
            iso,
            plans,
            batch_id=batch_id,
            stopping=lambda: self.stopping(),
            cancelled=lambda: batch_id in self.cancelled,
        )
        return results, iso

    @property
    def sandboxed(self) -> bool:
        """The per-record style, read and processed in one task: its records run in the
        worker's sandbox (:mod:`~kinesis_spout.spark.sandbox`)."""
        return self.frames is None and not self.process_partitions

    @property
    def healthy(self) -> bool:
        """The last job ran (see :attr:`PoisonJudge.healthy`)."""
        return self.poison_judge.healthy

    @healthy.setter
    def healthy(self, value: bool) -> None:
        self.poison_judge.healthy = value

    def collect(self, batch_id: int, plans: list[ReadPlan]) -> list[ReadResult]:
        """One Spark job of these plans."""
        sc = self.spark.sparkContext
        tasks = self.tasks_for(len(plans))
        description = f"kinesis-spout batch {batch_id}: {len(plans)} shards in {tasks} tasks"
        sc.setJobGroup(self.group(batch_id), description, interruptOnCancel=True)
        self.jobs_run += 1
        if self.frames is not None:
            done, jobs = self.frames.collect(plans, tasks, self.settings, self.run_id, batch_id)
            self.jobs_run += jobs - 1
            if self.frames.transform and self.settings.fast.enabled:
                follow_up(done, lambda again: self._again(batch_id, again), self.settings.fast)
            return done
        rdd = sc.parallelize(plans, tasks)
        if self.process_partitions:
            return shuffled_results(
                rdd, plans, self.settings, self.fn, batch_id, self.process_partitions
            )
        results: list[ReadResult] = rdd.mapPartitions(
            task_function(self.settings, self.fn, batch_id)
        ).collect()
        return results

    def _again(self, batch_id: int, plans: list[ReadPlan]) -> list[ReadResult]:
        """A transform's follow-up job: these retry plans, in one task each."""
        assert self.frames is not None
        self.jobs_run += 1
        done, jobs = self.frames.collect(plans, len(plans), self.settings, self.run_id, batch_id)
        self.jobs_run += jobs - 1
        return done

    def close(self) -> None:
        if self.frames is not None:
            self.frames.close()

    def group(self, batch_id: int) -> str:
        """The Spark job group of a micro-batch's jobs (unique to this run)."""
        return f"kinesis-spout-{self.run_id}-{batch_id}"

    def tasks_for(self, plans: int) -> int:
        """How many read tasks ``plans`` plans make: ``shards_per_task`` plans each, or
        (0) one task per core of the cluster (``defaultParallelism``), never more
        tasks than plans. With ``consumer = "efo"`` a task per plan: a subscription
        waits for events, so a task's shards would share its deadline one after the other."""
        if plans <= 1 or self.settings.subscribes:
            return max(plans, 1)
        per = self.shards_per_task
        if per <= 0:
            cores = max(int(self.spark.sparkContext.defaultParallelism), 1)
            per = math.ceil(plans / cores)
        return math.ceil(plans / per)

    def judge(self, batch_id: int, iso: ReadIsolation) -> None:
        """Raise :class:`~kinesis_spout.spark.isolation.BatchFailedError` unless the lone
        failures look like poison (:meth:`PoisonJudge.judge`), or when the re-runs could not
        isolate them all. When nothing ran before (one shard, the record at its head, as after
        a restart), a probe job of the same task function with nothing to read tells whether
        Spark runs Python tasks now."""
        ids = [r.stream_message_id for plan, _ in iso.alone for r in plan.retries]
        self.poison_judge.judge(batch_id, iso, ids, probe=functools.partial(self._probe, batch_id))
        self.poison_judge.raise_if_exhausted(batch_id, iso)

    def cancel(self, batch_id: int) -> None:
        """Give up the jobs of ``batch_id`` (a task past its deadline): cancel what runs
        (its Python workers are interrupted) and run nothing of it again."""
        self.cancelled.add(batch_id)
        self.spark.sparkContext.cancelJobGroup(self.group(batch_id))
        if self.frames is not None:
            self.frames.give_up(batch_id)

    def task_counts(self, batch_id: int) -> tuple[int, int] | None:
        """The tasks of ``batch_id``'s Spark jobs that run and that ended (completed or
        failed attempts), as Spark's status tracker shows them; None while it has no
        Spark job yet (its driver-side code runs). ``(0, 0)``: it waits for Spark (its
        executors busy, lost or not there yet), not on a record. The tracker may show a
        task's start or end only at its stage's next write (once per
        ``spark.ui.liveUpdatePeriod``): the counts may lag, never lead."""
        tracker = self.spark.sparkContext.statusTracker()
        jobs = tracker.getJobIdsForGroup(self.group(batch_id))
        running = ended = 0
        for job_id in jobs:
            info = tracker.getJobInfo(job_id)
            for stage_id in info.stageIds if info is not None else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    running += stage.numActiveTasks
                    ended += stage.numCompletedTasks + stage.numFailedTasks
        return (running, ended) if jobs else None

    def remember_poison(self, ids: list[str]) -> None:
        """These records failed alone: their retries that fail alone are poison too."""
        self.poison_judge.remember(ids)

    def _probe(self, batch_id: int, plan: ReadPlan) -> bool:
        """Whether Spark runs this job's task function now (on a task with nothing to read)."""
        probe = ReadPlan(plan.task, plan.stream, plan.shard_id, None)
        self.jobs_run += 1
        try:
            self.spark.sparkContext.parallelize([probe], 1).mapPartitions(
                task_function(self.settings, self.fn, batch_id)
            ).collect()
        except Exception as exc:
            log.warning("batch %d: a probe task failed too (%s)", batch_id, format_error(exc))
            return False
        return True


def _rest(plans: list[ReadPlan], done: list[ReadResult]) -> ReadPlan | None:
    """What is left of a lone read plan whose first half (``done``) read ok: the rest of
    its limit from where that half stopped; None when nothing is (a retry plan, the
    half failed, or its shard ended or was caught up). The caller asks only when the
    half found no record failing alone (that record ends this micro-batch's read).
    Reading on from there, not the whole limit again in the next micro-batch, finds a
    record that fails every task in a number of failed jobs that grows with log2 of
    the limit, not with its square."""
    if len(plans) != 1 or plans[0].is_retry or not done:
        return None
    plan, last = plans[0], done[-1].end
    left = plan.limit - sum(len(r) for r in done)
    if not 0 < left < plan.limit or last is None or last.position is None:
        return None  # nothing left, or nothing read (throttled): no progress to build on
    if last.ended or last.caught_up or last.failure is not None:
        return None
    return dataclasses.replace(plan, position=last.position, limit=left)


def _rest_of(plans: list[ReadPlan], done: list[ReadResult]) -> list[ReadPlan] | None:
    rest = _rest(plans, done)
    return [rest] if rest is not None else None


def _halves(plans: list[ReadPlan]) -> list[list[ReadPlan]]:
    """How a failed job is run again: task by task, then each task halved; [] at one record."""
    if len(plans) > 1:
        return [[p] for p in plans]
    plan = plans[0]
    if plan.is_retry and len(plan.retries) > 1:
        mid = len(plan.retries) // 2
        return [
            [dataclasses.replace(plan, retries=plan.retries[:mid])],
            [dataclasses.replace(plan, retries=plan.retries[mid:])],
        ]
    if not plan.is_retry and plan.limit > 1:
        return [[dataclasses.replace(plan, limit=plan.limit // 2)]]
    return []


PLANS: Cut[list[ReadPlan], ReadResult, ReadPlan] = Cut(
    halves=_halves,
    lone=lambda plans: plans[0],
    describe=lambda plans: f"a job of {len(plans)} tasks",
    rest=_rest_of,
)
"""How a failed job of read plans is cut (see the module docstring)."""
