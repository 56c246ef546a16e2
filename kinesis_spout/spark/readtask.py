"""Executor reads: one Spark task reads a shard, processes the records, and
returns only what the driver needs.

The driver (:mod:`kinesis_spout.spark.planner`) sends a :class:`ReadPlan` per
task: the shard, where to start (its open iterator, else after the last key
read, else its initial position) and a record limit; or, for a *retry task*,
the failed records to process again. On the executor :func:`run_plan`:

* calls GetRecords (the same :class:`~kinesis_spout.kinesis.getter.KinesisShardGetter`
  as the driver mode: KPL de-aggregation, throttling, 5xx and expired
  iterators retried with backoff *inside the task*) until the limit, the end
  of the available data (an answer that is not behind), the end of a closed
  shard, or ``read_seconds``; a throttled shard never fails the task. With
  ``consumer = "efo"`` it subscribes instead (:mod:`kinesis_spout.kinesis.efo_read`:
  events until the same ends, then the subscription is closed);
* runs the user's per-record function on each record (an ``Exception`` fails
  the record; a ``BaseException`` fails the task);
* returns a :class:`ReadResult`: per record its key and status, the error and
  payload **of failed records only**, and the read's end: last key, next
  iterator, MillisBehindLatest, whether the shard ended, its child shards; and
  the figures of the driver's metrics (GetRecords durations, throttles, errors,
  fast retries), so no endpoint runs on an executor.

A task that Spark runs again (a lost executor) starts from the same plan: the
same position, hence the same records in the same order (at-least-once,
nothing skipped). The driver takes one result per task.
"""

from __future__ import annotations

import os
import random
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from kinesis_spout.config import SpoutConfig
from kinesis_spout.kinesis.efo_read import EfoTarget, read_until, subscribed_getter
from kinesis_spout.kinesis.getter import GetterPosition, KinesisShardGetter, ShardBatch
from kinesis_spout.records import Record, ShardInfo
from kinesis_spout.spark.arrow import format_error
from kinesis_spout.spark.fastretry import FastRetry
from kinesis_spout.spark.processing import InputRecord, RecordFunction
from tracker import ExponentialBackoff, JitteredBackoff, SequenceKey

_CLIENTS: dict[tuple[str | None, str], Any] = {}
"""boto3 clients of this executor process, per (endpoint, region)."""


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


def _client(settings: ReadSettings) -> Any:
    from kinesis_spout.kinesis.client import make_client

    k = (settings.endpoint_url, settings.region)
    client = _CLIENTS.get(k)
    if client is None:
        client = _CLIENTS[k] = make_client(settings.endpoint_url, settings.region)
    return client


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


def read_shard(
    plan: ReadPlan,
    settings: ReadSettings,
    consume: Callable[[list[Record]], None],
    res: ReadResult,
) -> None:
    """GetRecords from the plan's position until its limit or the end of the data."""
    assert plan.position is not None
    if settings.consumer_arn is not None:
        read_subscribed(plan, settings, consume, res)
        return
    from kinesis_spout.kinesis.api import KinesisApi

    pos = plan.position
    getter = KinesisShardGetter(
        KinesisApi(_client(settings), settings.stream_name),
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
    deadline = time.monotonic() + settings.read_seconds
    remaining = plan.limit
    while remaining > 0 and not getter.ended:
        now = time.monotonic()
        if now < getter.next_poll_at:
            if getter.next_poll_at > deadline:
                break
            time.sleep(getter.next_poll_at - now)
            now = time.monotonic()
        asked = getter.limit = min(settings.records_per_call, remaining)
        batch = getter.poll(now)
        if batch.seconds is not None:
            res.call_seconds.append(batch.seconds)
        if batch.error is not None:
            _count_error(res, batch)
            if time.monotonic() >= deadline:
                break
            continue
        _take_page(res, batch)
        consume(batch.records)
        remaining -= len(batch.records)
        got = len(batch.records)
        res.caught_up = not got or (got < asked and not batch.millis_behind_latest)
        if batch.ended or res.caught_up:
            break
    res.position = getter.position
    res.ended = getter.ended
    res.behind = getter.millis_behind_latest
    res.calls = getter.calls


def read_subscribed(
    plan: ReadPlan,
    settings: ReadSettings,
    consume: Callable[[list[Record]], None],
    res: ReadResult,
) -> None:
    """Enhanced fan-out: subscribe at the plan's position and take events until its
    limit, the tip, the shard's end or ``read_seconds``."""
    pos = plan.position
    assert pos is not None and settings.consumer_arn is not None
    target = EfoTarget(
        settings.stream_name,
        settings.region,
        settings.endpoint_url,
        settings.consumer_arn,
        settings.throttle_backoff,
        settings.throttle_backoff_max,
    )
    getter = subscribed_getter(
        target,
        plan.shard_id,
        start=pos.after,
        after_whole=pos.after_whole,
        position=pos.initial,
        timestamp=pos.timestamp,
        limit=plan.limit,
        closed=plan.closed,
    )

    def take(batch: ShardBatch) -> int:
        _take_page(res, batch)
        consume(batch.records)
        return len(batch.records)

    end = read_until(getter, plan.limit, settings.read_seconds, take)
    for err in end.errors:
        _count_error(res, ShardBatch([], 0.0, error=err))
    res.caught_up = end.caught_up
    res.position = getter.position
    res.ended = getter.ended
    res.behind = getter.millis_behind_latest
    res.calls = end.events


def _count_error(res: ReadResult, batch: ShardBatch) -> None:
    from kinesis_spout.errors import ExpiredIteratorError, ResourceInUseError, ThrottledError

    err = batch.error
    res.last_error = format_error(err) if err is not None else None
    if isinstance(err, ThrottledError | ResourceInUseError):
        res.throttled += 1
    elif isinstance(err, ExpiredIteratorError):
        res.expired += 1
    else:
        res.transient += 1


def _take_page(res: ReadResult, batch: ShardBatch) -> None:
    if batch.child_shards:
        res.child_shards = batch.child_shards
    if batch.aggregates:
        res.aggregates += batch.aggregates
    res.skipped += batch.skipped
    res.corrupt += batch.corrupt_aggregates
    if batch.skipped_tail is not None:
        res.skipped_tail = batch.skipped_tail
    elif batch.records:
        res.skipped_tail = None  # records came after it: they cover it


def run_plan(
    plan: ReadPlan,
    settings: ReadSettings,
    fn: RecordFunction,
    batch_id: int,
) -> ReadResult:
    """One task: read (or take the retries), process, write ok rows to the sink."""
    t0 = time.monotonic()
    res = ReadResult(plan.task, plan.shard_id, executor=executor_id(), pid=os.getpid())
    keep: list[Record] | None = [] if settings.sink != "none" else None
    proc = _Processing(fn, res, keep, settings.fast)
    if plan.is_retry:
        proc.run(plan.retries)
    else:
        read_shard(plan, settings, proc.run, res)
    if keep:
        write_rows(settings.sink, batch_id, keep)
    res.seconds = time.monotonic() - t0
    return res


def write_rows(sink_target: str, batch_id: int, rows: list[Record]) -> None:
    """The ok rows of this task, written before their statuses go back (at-least-once)."""
    from kinesis_spout.spark.arrow import records_to_arrow
    from kinesis_spout.spark.sinks import open_sink

    sink = open_sink(sink_target)
    try:
        sink.write(batch_id, records_to_arrow(rows).drop_columns(["_row"]))
    finally:
        sink.close()


def task_function(
    settings: ReadSettings, fn: RecordFunction, batch_id: int
) -> Callable[[Iterator[ReadPlan]], Iterator[ReadResult]]:
    """The ``mapPartitions`` body: each plan of the partition, run."""

    def run(plans: Iterator[ReadPlan]) -> Iterator[ReadResult]:
        for plan in plans:
            yield run_plan(plan, settings, fn, batch_id)

    return run
