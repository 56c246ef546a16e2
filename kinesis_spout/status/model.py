"""What ``kinesis-spout status`` reports: value objects, no I/O.

The sources (:mod:`.sources_store`, :mod:`.sources_kinesis`,
:mod:`.sources_deadletters`) read the inputs, :func:`.collect.collect` assembles
them into one :class:`StatusReport`, and :mod:`.render` prints it as a table or
as one JSON document.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.records import Checkpoint


class StatusError(KinesisSpoutError):
    """``status`` cannot report: the store or the stream is missing or unreachable."""


class ShardPhase(enum.Enum):
    """Where a shard is in its life, from the ListShards lineage and the checkpoints.

    * ``OPEN``: readable and still taking new records (or closed with parents pending
      is ``WAITING``, below);
    * ``WAITING``: a parent that Kinesis still lists has no ``shard_end`` checkpoint:
      nothing of this shard is read before every record of its parents is done;
    * ``CLOSED``: closed by a split or merge (Kinesis gives it an ending sequence
      number), but not every record of it is done yet;
    * ``ENDED``: its checkpoint says ``shard_end``: every record is done, its
      children may start;
    * ``UNLISTED``: there is a checkpoint but Kinesis does not list the shard any
      more (trimmed after the retention period, or a re-created stream).

    A shard goes ``WAITING -> OPEN -> CLOSED -> ENDED`` (a shard that never had
    parents starts ``OPEN``; one closed before it was started may go from
    ``WAITING`` to ``CLOSED``), and becomes ``UNLISTED`` once Kinesis drops it.
    """

    OPEN = "open"
    WAITING = "waiting"
    CLOSED = "closed"
    ENDED = "ended"
    UNLISTED = "unlisted"


class LeaseState(enum.Enum):
    """The job lease: ``HELD`` by a running driver, or ``FREE``."""

    HELD = "held"
    FREE = "free"


@dataclass(frozen=True, slots=True)
class JobLeaseStatus:
    """The job lease of ``job`` in the checkpoint store (one driver per job)."""

    state: LeaseState
    where: str
    """The lock file, ZooKeeper node or DynamoDB item of the lease."""
    holder: str | None = None
    """``host:pid`` of the holder, when held (as the holder recorded it)."""
    since: datetime | None = None
    """When the holder took the lease."""
    holder_gone: bool = False
    """ZooKeeper and DynamoDB: the holder ran on this host and has died; its session or
    lease has not expired yet, so the node or item is still there (the next driver takes
    it over)."""


@dataclass(frozen=True, slots=True)
class ShardLease:
    """A ZooKeeper shard lease (the ephemeral ``holder`` node of the shard)."""

    owner: str
    """The worker id that holds it."""
    host: str | None
    pid: int | None
    acquired_at: datetime | None
    """The holder node's creation time (ZooKeeper's clock)."""
    epoch: int | None
    """Acquisitions of this shard's lease so far (the checkpoint fence)."""


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker of the stream (its ephemeral member node)."""

    worker_id: str
    host: str | None
    pid: int | None
    since: datetime | None


@dataclass(frozen=True, slots=True)
class ProbeStart:
    """Where reading of a shard would start (where the lag probe opens its iterator)."""

    iterator_type: str
    """``AFTER_SEQUENCE_NUMBER``, ``AT_TIMESTAMP`` or ``TRIM_HORIZON``."""
    sequence: str | None = None
    timestamp: datetime | None = None


@dataclass(frozen=True, slots=True)
class LagProbe:
    """One GetShardIterator at the shard's start plus one GetRecords with ``Limit=1``."""

    pending: bool | None
    """A record is waiting after the checkpoint (None: unknown, see ``error``)."""
    millis_behind_latest: int | None = None
    """MillisBehindLatest of the GetRecords answer."""
    next_arrival: datetime | None = None
    """ApproximateArrivalTimestamp of the first record not yet done, if one came back."""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ShardStatus:
    """One row of the report."""

    shard_id: str
    phase: ShardPhase
    parents: tuple[str, ...]
    checkpoint: Checkpoint | None
    checkpoint_age: float | None
    """Seconds since the checkpoint was last written."""
    lease: ShardLease | None
    lease_age: float | None
    """Seconds since the lease was acquired."""
    lag: LagProbe | None
    """None: not probed (an ended or unlisted shard, LATEST without checkpoint, --no-lag)."""
    next_record_age: float | None
    """Seconds since the first record not yet done arrived (from the probe)."""
    dead_letters: int | None
    """Dead letters of this shard in the dead-letter target (None: not known)."""


@dataclass(frozen=True, slots=True)
class Summary:
    """Totals over the shards, for scripts and the table's last lines."""

    shards: int
    by_phase: tuple[tuple[str, int], ...]
    """``(phase, count)`` for every phase, in :class:`ShardPhase` order."""
    checkpoints: int
    """Shards with a checkpoint."""
    pending: int
    """Shards whose probe found a record waiting."""
    max_millis_behind_latest: int | None
    oldest_checkpoint_age: float | None
    dead_letters: int | None
    unowned: tuple[str, ...]
    """ZooKeeper stores: open or closed shards that no worker holds a lease on."""


@dataclass(frozen=True, slots=True)
class StatusReport:
    """Everything ``kinesis-spout status`` shows, at ``generated_at``."""

    generated_at: datetime
    job: str
    stream: str
    stream_status: str
    checkpoint_store: str
    dead_letter: str
    job_lease: JobLeaseStatus
    workers: tuple[WorkerInfo, ...] | None
    """None for a ``file://`` store (no shard leases: the job-lease holder reads every shard)."""
    shards: tuple[ShardStatus, ...]
    summary: Summary
    kinesis_calls: int
    notes: tuple[str, ...]
    problems: tuple[str, ...]
    """What could not be read (a lag probe, the dead-letter target); the rest is shown."""
