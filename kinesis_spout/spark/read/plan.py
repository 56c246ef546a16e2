"""What a read task is given and what it gives back: the values that travel between the
driver and the executors (pickled with each Spark job and its results).

* :class:`ReadSettings`: what every task of a job needs from the config;
* :class:`ReadPlan`: one shard's read (a position and a limit) or its retries;
* :class:`ReadResult`: per record its key and status, the failed records' payloads,
  the read's end and the figures of the driver's metrics.

The code that reads and processes is :mod:`kinesis_spout.spark.read.task` (a task) and
:mod:`kinesis_spout.spark.read.shards` (the shards of a task).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kinesis_spout.aws import AssumedRole
from kinesis_spout.records import GetterPosition, Record, ShardInfo
from kinesis_spout.spark.process.fastretry import FastRetry
from tracker import SequenceKey

if TYPE_CHECKING:
    from kinesis_spout.config import SpoutConfig


@dataclass(frozen=True, slots=True)
class StreamTarget:
    """How the tasks of a job of several streams call one of them."""

    name: str
    arn: str | None = None
    """Given: the calls name the stream by ``StreamARN``."""
    consumer_arn: str | None = None
    """``consumer = "efo"``: the consumer the tasks subscribe as, on this stream."""


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
    role: AssumedRole | None = None
    """The IAM role the tasks' clients assume (None: the profile's own credentials)."""
    poll_threads: int = 1
    """GetRecords calls a task keeps in flight at once (one per shard at most)."""
    stream_arn: str | None = None
    """The stream's ARN, when the config gives it as one."""
    streams: tuple[StreamTarget, ...] = ()
    """A job of several streams: each stream's name, ARN and consumer (a plan says its
    stream; :meth:`for_plan`)."""

    @property
    def subscribes(self) -> bool:
        """The tasks subscribe (``consumer = "efo"``, for the stream or any of the job's)."""
        return self.consumer_arn is not None or any(t.consumer_arn for t in self.streams)

    def for_plan(self, plan: ReadPlan) -> ReadSettings:
        """These settings for the stream ``plan`` reads."""
        if not self.streams:  # one stream: these are its settings
            return self
        for target in self.streams:
            if target.name == plan.stream:
                return replace(
                    self,
                    stream_name=target.name,
                    stream_arn=target.arn,
                    consumer_arn=target.consumer_arn,
                    streams=(),
                )
        raise ValueError(f"plan {plan.task} reads stream {plan.stream!r}, not one of the job's")

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
            role=config.assumed_role,
            poll_threads=config.poll_threads,
            stream_arn=config.stream_arn,
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
    stream: str = ""
    """The stream of the shard (set by the job's planners)."""

    @property
    def is_retry(self) -> bool:
        return self.position is None

    @property
    def size(self) -> int:
        """The most user records the plan may yield: its limit, or its retries."""
        return len(self.retries) if self.position is None else self.limit


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
    """From the task's start to this result: the whole task (per-record reads), or to
    the plan's records (recorded reads hand each plan on as its read ends)."""

    stream: str = ""
    """The plan's stream."""

    @classmethod
    def for_plan(cls, plan: ReadPlan, executor: str = "", pid: int = 0) -> ReadResult:
        """An empty result of ``plan`` (its task, shard and stream), read by ``executor``."""
        return cls(plan.task, plan.shard_id, executor=executor, pid=pid, stream=plan.stream)

    def __len__(self) -> int:
        return len(self.ok)

    def key(self, i: int) -> SequenceKey:
        return SequenceKey(int(self.seqs[i]), self.subs[i])
