"""Executor reads: one Spark task reads its shards, processes the records, and
returns only what the driver needs.

The driver (:mod:`kinesis_spout.spark.planner`) plans a :class:`ReadPlan` per
shard, and a task gets one or more of them (``shards_per_task``): the shard,
where to start (its open iterator, else after the last key read, else its
initial position) and a record limit; or, for a *retry plan*, the failed
records to process again. On the executor :func:`run_plans`:

* reads the shards (:func:`~kinesis_spout.spark.shardread.read_shards`:
  interleaved within one deadline, polling or enhanced fan-out, each up to
  its limit in user records, the tip, the end of a closed shard or
  ``read_seconds``; a throttled shard never fails the task);
* runs the user's per-record function on each record (an ``Exception`` fails
  the record; a ``BaseException`` fails the task);
* returns a :class:`ReadResult` per plan: per record its key and status, the error and
  payload **of failed records only**, and the read's end: last key, next
  iterator, MillisBehindLatest, whether the shard ended, its child shards; and
  the figures of the driver's metrics (GetRecords durations, throttles, errors,
  fast retries), so no endpoint runs on an executor.

A task that Spark runs again (a lost executor) starts from the same plans: the
same positions, hence the same records in the same order (at-least-once,
nothing skipped). The driver takes one result per task.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

from kinesis_spout.config import SpoutConfig
from kinesis_spout.kinesis.getter import GetterPosition
from kinesis_spout.records import Record, ShardInfo
from kinesis_spout.spark.arrow import format_error
from kinesis_spout.spark.fastretry import FastRetry
from kinesis_spout.spark.processing import InputRecord, RecordFunction
from kinesis_spout.spark.shardread import Read, read_shards
from tracker import SequenceKey


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """What every task of a job needs from the config (shipped once per job)."""

    stream_name: str
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
    consumer_arn: str | None = None
    """``consumer = "efo"``: the tasks subscribe as this consumer (set once the driver
    registered it)."""
    profile: str | None = None
    """The AWS profile of the tasks' clients (None: ``AWS_PROFILE`` or the default chain)."""
    poll_threads: int = 1
    """GetRecords calls a task keeps in flight at once (one per shard at most)."""

    @classmethod
    def of(cls, config: SpoutConfig) -> ReadSettings:
        return cls(
            config.stream_name,
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
            poll_threads=config.poll_threads,
        )


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """One task of a micro-batch: read ``limit`` records of a shard from
    ``position``, or (``position`` None) process the ``retries`` again."""

    task: int
    shard_id: str
    position: GetterPosition | None
    limit: int = 0
    retries: tuple[Record, ...] = ()
    closed: bool = False
    """ListShards says the shard is closed (a subscription then probes its end)."""

    @property
    def is_retry(self) -> bool:
        return self.position is None


@dataclass(slots=True)
class ReadResult:
    """What a task returns (see the module docstring)."""

    task: int
    shard_id: str
    seqs: list[str] = field(default_factory=list)
    """Sequence number of each record, in shard order (retry tasks: plan order)."""
    subs: list[int] = field(default_factory=list)
    ok: bytearray = field(default_factory=bytearray)
    """1 per record processed ok, 0 per failed record."""
    errors: dict[int, str] = field(default_factory=dict)
    failed: dict[int, Record] = field(default_factory=dict)
    """The payloads of the failed records, by index (nothing of the others); their
    ``attempt`` is their last delivery (fast retries count)."""
    retried: int = 0
    """Extra deliveries made by fast retries in this task."""
    position: GetterPosition | None = None
    """Where the next read of the shard starts (None: a retry task)."""
    ended: bool = False
    caught_up: bool = False
    """The read stopped at the end of the available data (not at its limit)."""
    behind: int | None = None
    child_shards: tuple[ShardInfo, ...] = ()
    aggregates: tuple[int, ...] = ()
    skipped: int = 0
    skipped_tail: SequenceKey | None = None
    corrupt: int = 0
    calls: int = 0
    throttled: int = 0
    expired: int = 0
    transient: int = 0
    """5xx answers and dropped connections (retried inside the task)."""
    call_seconds: list[float] = field(default_factory=list)
    """The duration of each GetRecords call (for the driver's latency histogram)."""
    last_error: str | None = None
    executor: str = ""
    pid: int = 0
    seconds: float = 0.0

    def __len__(self) -> int:
        return len(self.ok)

    def key(self, i: int) -> SequenceKey:
        return SequenceKey(int(self.seqs[i]), self.subs[i])


def executor_id() -> str:
    try:
        from pyspark import SparkEnv  # type: ignore[attr-defined]

        return str(SparkEnv.get().executorId())  # pragma: no cover - JVM side only
    except Exception:
        return f"{socket.gethostname()}:{os.getpid()}"


def as_input(r: Record) -> InputRecord:
    return InputRecord(
        r.stream_name,
        r.shard_id,
        r.sequence_number,
        r.sub_sequence_number,
        r.partition_key,
        r.data,
        r.approximate_arrival,
        r.attempt,
    )


class _Processing:
    """Runs the function on records (with fast retries) and fills a result."""

    def __init__(
        self,
        fn: RecordFunction,
        result: ReadResult,
        keep: list[Record] | None,
        fast: FastRetry | None = None,
    ):
        self.fn = fn
        self.result = result
        self.keep = keep  # ok records, for a row sink
        self.fast = fast or FastRetry()

    def run(self, records: Iterable[Record]) -> None:
        res, fn, keep, call = self.result, self.fn, self.keep, self.fast.call
        seqs, subs, ok = res.seqs, res.subs, res.ok
        for r in records:
            i = len(ok)
            seqs.append(r.sequence_number)
            subs.append(r.sub_sequence_number)
            error, attempt = call(fn, as_input(r), format_error)
            if attempt > r.attempt:
                res.retried += attempt - r.attempt
            if error is not None:
                ok.append(0)
                res.errors[i] = error
                res.failed[i] = r if attempt == r.attempt else replace(r, attempt=attempt)
            else:
                ok.append(1)
                if keep is not None:
                    keep.append(r)


def run_plan(
    plan: ReadPlan,
    settings: ReadSettings,
    fn: RecordFunction,
    batch_id: int,
) -> ReadResult:
    """One plan as a task of its own (see :func:`run_plans`)."""
    return run_plans([plan], settings, fn, batch_id)[0]


def run_plans(
    plans: list[ReadPlan],
    settings: ReadSettings,
    fn: RecordFunction,
    batch_id: int,
) -> list[ReadResult]:
    """One task: its retry plans processed, its read plans read (interleaved, within
    one deadline, :func:`~kinesis_spout.spark.shardread.read_shards`) and processed
    page by page; the ok rows written to the sink before the statuses go back."""
    t0 = time.monotonic()
    keep: list[Record] | None = [] if settings.sink != "none" else None
    results: list[ReadResult] = []
    reads: list[Read] = []
    for plan in plans:
        res = ReadResult(plan.task, plan.shard_id, executor=executor_id(), pid=os.getpid())
        proc = _Processing(fn, res, keep, settings.fast)
        results.append(res)
        if plan.is_retry:
            proc.run(plan.retries)
        else:
            reads.append((plan, proc.run, res))
    if reads:
        read_shards(reads, settings)
    if keep:
        write_rows(settings.sink, batch_id, keep)
    seconds = time.monotonic() - t0
    for res in results:
        res.seconds = seconds
    return results


def write_rows(sink_target: str, batch_id: int, rows: list[Record]) -> None:
    """The ok rows of this task, written before their statuses go back (at-least-once)."""
    from kinesis_spout.spark.arrow import records_to_arrow
    from kinesis_spout.spark.sinks import write_task_rows

    write_task_rows(sink_target, batch_id, [records_to_arrow(rows).drop_columns(["_row"])])


def task_function(
    settings: ReadSettings, fn: RecordFunction, batch_id: int
) -> Callable[[Iterator[ReadPlan]], Iterator[ReadResult]]:
    """The ``mapPartitions`` body: the plans of the partition, run as one task."""

    def run(plans: Iterator[ReadPlan]) -> Iterator[ReadResult]:
        yield from run_plans(list(plans), settings, fn, batch_id)

    return run
