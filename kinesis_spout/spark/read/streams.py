"""Executor reads over every stream of a job: one :class:`ExecutorReadPlanner` per stream.

The micro-batch loop (:mod:`kinesis_spout.spark.executor_driver`) talks to
:class:`StreamPlanners` whether the job reads one stream or several. It holds the reader
(a :class:`~kinesis_spout.spout.KinesisSpout`, or a
:class:`~kinesis_spout.multistream.MultiStreamSpout` whose per-stream spouts each get a
planner once it is open) and:

* plans every stream in each micro-batch (each stream's shards get their plans as in a
  job of that stream alone, so a stream of 1 shard is planned as often as one of 64; the
  stream that comes first turns at each batch), the plans tagged with their stream and
  numbered by one counter, so a task number names one plan of the job. When one stream
  has plans, the shards of the others that wait at their tip may join the micro-batch
  early, as the shards of one stream do: idle streams poll in step with the busy ones,
  not in micro-batches of their own;
* routes each result, and each plan that failed alone, to its stream's planner;
* keys the shards that are in a running job by ``(stream, shard)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator
from dataclasses import replace

from kinesis_spout.errors import StreamNotFoundError
from kinesis_spout.multistream import MultiStreamSpout
from kinesis_spout.spark.read.plan import ReadPlan, ReadResult, ReadSettings, StreamTarget
from kinesis_spout.spark.read.planner import ExecutorReadPlanner
from kinesis_spout.spout import KinesisSpout

ShardKey = tuple[str, str]
"""``(stream, shard id)``: a shard of the job."""


def plan_key(plan: ReadPlan) -> ShardKey:
    return (plan.stream, plan.shard_id)


class StreamPlanners:
    """The planners of a job's streams behind the one face the loop uses (see the module
    docstring)."""

    def __init__(self, reader: KinesisSpout | MultiStreamSpout) -> None:
        self.spout = reader
        self.config = reader.config
        self._tasks: Iterator[int] = itertools.count(1)
        self._planners: dict[str, ExecutorReadPlanner] = {}
        self._turn = 0

    @classmethod
    def of(cls, planner: ExecutorReadPlanner) -> StreamPlanners:
        """The planners of a one-stream job whose planner is built already."""
        out = cls(planner.spout)
        out._planners = {planner.config.stream_name: planner}
        planner.tasks = out._tasks
        return out

    @property
    def planners(self) -> dict[str, ExecutorReadPlanner]:
        """Each stream still read, its planner (a multi-stream reader's once it is open;
        a stream it let go, deleted, has none from then on)."""
        reader = self.spout
        if isinstance(reader, KinesisSpout):
            if not self._planners:
                self._planners = {reader.config.stream_name: self._planner(reader)}
            return self._planners
        for name, spout in reader.spouts.items():
            if name not in self._planners:
                self._planners[name] = self._planner(spout)
        for name in [n for n in self._planners if n not in reader.spouts]:
            del self._planners[name]
        return self._planners

    def _planner(self, spout: KinesisSpout) -> ExecutorReadPlanner:
        planner = ExecutorReadPlanner(spout)
        planner.tasks = self._tasks
        return planner

    # ------------------------------------------------------------------ planning
    def plan(self, max_records: int, busy: Collection[ShardKey] = ()) -> list[ReadPlan]:
        """Every stream's next tasks (see :meth:`ExecutorReadPlanner.plan`), the shards
        ``busy`` left out; ``[]``: nothing to do now."""
        planners = list(self.planners.items())
        k = self._turn % max(len(planners), 1)
        self._turn += 1
        order = planners[k:] + planners[:k]
        plans = self._plan(order, max_records, busy, early=False)
        if plans:  # a micro-batch runs: the streams with none may join it early
            planned = {p.stream for p in plans}
            rest = [(n, p) for n, p in order if n not in planned]
            plans += self._plan(rest, max_records, busy, early=True)
        return plans

    def _plan(
        self,
        planners: list[tuple[str, ExecutorReadPlanner]],
        max_records: int,
        busy: Collection[ShardKey],
        early: bool,
    ) -> list[ReadPlan]:
        """The plans of these streams, tagged with their stream (a stream found gone is
        let go)."""
        plans: list[ReadPlan] = []
        for name, planner in planners:
            mine = {shard for stream, shard in busy if stream == name}
            try:
                planned = planner.plan(max_records, mine, early)
            except StreamNotFoundError as exc:  # deleted, or created again
                if not isinstance(self.spout, MultiStreamSpout):
                    raise
                self.spout.let_go(planner.spout, str(exc))
                continue
            plans.extend(replace(p, stream=name) for p in planned)
        return plans

    def wake_in(self, busy: Collection[ShardKey] = ()) -> float:
        """Seconds until some stream may have a task (0: plan now)."""
        waits = [
            planner.wake_in({shard for stream, shard in busy if stream == name})
            for name, planner in self.planners.items()
        ]
        return min(waits, default=1.0)

    def chores_in(self) -> float:
        """Seconds until some stream's next checkpoint save."""
        return min((planner.chores_in() for planner in self.planners.values()), default=1.0)

    def settings(self, base: ReadSettings) -> ReadSettings:
        """``base`` with what the open streams add: each stream's ARN and, with
        ``consumer = "efo"``, its consumer's ARN (the tasks subscribe as it)."""
        targets = tuple(
            StreamTarget(name, planner.spout.config.stream_arn, planner.consumer_arn)
            for name, planner in self.planners.items()
        )
        if len(targets) == 1:
            (one,) = targets
            return replace(base, stream_arn=one.arn, consumer_arn=one.consumer_arn)
        return replace(base, streams=targets)

    # ------------------------------------------------------------------ results
    def apply(self, results: Iterable[ReadResult]) -> tuple[int, int]:
        """Each result tracked by its stream's planner; (acked, failed) records. A result
        of a stream let go meanwhile is dropped (its records come again from its
        checkpoint, as a released shard's do)."""
        by_stream: dict[str, list[ReadResult]] = {}
        for res in results:
            by_stream.setdefault(res.stream, []).append(res)
        acked = failed = 0
        for name, mine in by_stream.items():
            planner = self.planners.get(name)
            if planner is not None:
                a, f = planner.apply(mine)
                acked, failed = acked + a, failed + f
        return acked, failed

    def fail_alone(self, plan: ReadPlan, error: str) -> list[str]:
        """See :meth:`ExecutorReadPlanner.fail_alone`, by the plan's stream."""
        planner = self.planners.get(plan.stream)
        return planner.fail_alone(plan, error) if planner is not None else []

    def hung(self, plan: ReadPlan, error: str) -> list[str]:
        """See :meth:`ExecutorReadPlanner.hung`, by the plan's stream."""
        planner = self.planners.get(plan.stream)
        return planner.hung(plan, error) if planner is not None else []

    def walk(self, busy: Collection[ShardKey] = ()) -> list[str]:
        """Every stream's :meth:`ExecutorReadPlanner.walk`, the shards ``busy`` left out
        (a stream found gone is let go, as when planning)."""
        failed: list[str] = []
        for name, planner in list(self.planners.items()):
            mine = {shard for stream, shard in busy if stream == name}
            try:
                failed += planner.walk(mine)
            except StreamNotFoundError as exc:  # deleted, or created again
                if not isinstance(self.spout, MultiStreamSpout):
                    raise
                self.spout.let_go(planner.spout, str(exc))
        return failed

    # ------------------------------------------------------------------ views
    @property
    def readers(self) -> set[tuple[str, int]]:
        """(executor, pid) of every task whose result was applied."""
        return set().union(*(p.readers for p in self.planners.values()))

    @property
    def read_tasks(self) -> int:
        return sum(p.read_tasks for p in self.planners.values())

    @property
    def retry_tasks(self) -> int:
        return sum(p.retry_tasks for p in self.planners.values())
