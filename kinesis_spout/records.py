"""Value objects passed between the reader, the spout and the stores.

Frozen, slotted dataclasses: no raw boto3 dictionaries travel past the
Kinesis adapter (:mod:`kinesis_spout.kinesis`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from tracker import SequenceKey

if TYPE_CHECKING:
    from kinesis_spout.errors import KinesisError


def message_id(shard_id: str, key: SequenceKey) -> str:
    """The Storm message id of a record: ``"<shardId>:<sequence>[:<sub>]"``."""
    if key.sub_sequence:
        return f"{shard_id}:{key.sequence}:{key.sub_sequence}"
    return f"{shard_id}:{key.sequence}"


def parse_message_id(mid: str) -> tuple[str, SequenceKey]:
    """Inverse of :func:`message_id`; ``ValueError`` naming the id if malformed.

    Shard ids never contain ``:`` (they look like ``shardId-000000000003``).
    """
    parts = mid.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise ValueError(f"malformed message id {mid!r}: expected '<shardId>:<sequence>[:<sub>]'")
    try:
        sub = int(parts[2]) if len(parts) == 3 else 0
        return parts[0], SequenceKey.parse(parts[1], sub)
    except ValueError as exc:
        raise ValueError(f"malformed message id {mid!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Record:
    """One Kinesis record (or one user record of a KPL aggregate)."""

    stream_name: str
    """The stream it was read from."""
    shard_id: str
    """The shard it was read from."""
    sequence_number: str
    """Kinesis sequence number: a decimal string of up to 129 digits (real ones have 56)."""
    sub_sequence_number: int
    """Index inside a KPL aggregate; 0 for a plain record."""
    partition_key: str
    """The partition key (the user record's key for de-aggregated records)."""
    data: bytes
    """The payload."""
    approximate_arrival: datetime | None
    """When Kinesis accepted the record, if reported (an aware datetime; UTC with
    :func:`~kinesis_spout.kinesis.client.make_client`'s client)."""
    key: SequenceKey
    """Numeric ordering key ``(sequence, sub_sequence)`` used by the tracker."""
    attempt: int = 1
    """Delivery attempt, 1 for the first delivery, 2 for the first retry ..."""
    millis_behind_latest: int | None = field(default=None, compare=False)
    """MillisBehindLatest of the GetRecords answer that carried it."""

    @property
    def message_id(self) -> str:
        """``"<shardId>:<sequence>[:<sub>]"``: the id used for ack/fail."""
        return message_id(self.shard_id, self.key)


class ShardState(enum.Enum):
    """Lifecycle of a shard as this worker sees it.

    Transitions::

        WAITING  --all parents ENDED-->  OPEN
        OPEN     --no NextShardIterator-->  DRAINING
        DRAINING --every record done and shard_end checkpointed-->  ENDED

    A shard with no parent (or whose parents are unknown/expired) starts OPEN.
    """

    WAITING = "waiting"
    OPEN = "open"
    DRAINING = "draining"
    ENDED = "ended"


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """One shard as described by ListShards."""

    shard_id: str
    parent_shard_id: str | None = None
    adjacent_parent_shard_id: str | None = None
    starting_sequence_number: str | None = None
    ending_sequence_number: str | None = None
    """Set once the shard is closed (after a split or merge)."""

    @property
    def parents(self) -> tuple[str, ...]:
        return tuple(p for p in (self.parent_shard_id, self.adjacent_parent_shard_id) if p)

    @property
    def is_closed(self) -> bool:
        return self.ending_sequence_number is not None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """ "Everything up to and including this key is done" for one shard."""

    stream_name: str
    shard_id: str
    sequence_number: str | None
    """The highest done sequence number; ``None`` only for an ended shard
    whose records were all read before (or that had none)."""
    sub_sequence_number: int = 0
    shard_end: bool = False
    """The shard is closed and every record in it is done: children may start."""
    job_name: str = ""
    owner: str = ""
    updated_at: datetime | None = None
    start_at: datetime | None = None
    """A pinned start, saved at a job's first open with LATEST or AT_TIMESTAMP before
    anything is read: nothing of the shard is done yet, and reading starts
    AT_TIMESTAMP of this time (``sequence_number`` is None). Any real position
    is after it."""
    resets: int = 0
    """How many times an operator reset this checkpoint (``kinesis-spout checkpoints
    reset``): a store refuses a save from a reader that loaded an earlier count."""

    @property
    def is_pin(self) -> bool:
        """A pinned start position, not a position reached by reading."""
        return self.sequence_number is None and not self.shard_end and self.start_at is not None

    @property
    def key(self) -> SequenceKey | None:
        if self.sequence_number is None:
            return None
        return SequenceKey(int(self.sequence_number), self.sub_sequence_number)

    def is_after(self, other: Checkpoint) -> bool:
        """True if this checkpoint is strictly further along than ``other``."""
        if other.shard_end:
            return False
        if self.shard_end:
            return True
        mine, theirs = self.key, other.key
        if theirs is None:
            return mine is not None
        return mine is not None and mine > theirs


@dataclass(frozen=True, slots=True)
class ShardBatch:
    """What one :meth:`KinesisShardGetter.poll` produced."""

    records: list[Record]
    """New records, in shard order (keys strictly increasing, all ``> after``)."""
    next_poll_at: float
    """Clock time before which another poll does nothing (``inf`` once ended)."""
    ended: bool = False
    """The shard is closed and ``records`` are its last ones."""
    called: bool = False
    """A GetRecords answer was received in this poll."""
    millis_behind_latest: int | None = None
    """MillisBehindLatest of that answer."""
    child_shards: tuple[ShardInfo, ...] = ()
    """ChildShards of that answer (at the end of a closed shard)."""
    error: KinesisError | None = None
    """A retriable error this poll backed off from (for logs and metrics); the rest of
    the batch stands (an enhanced fan-out poll may hand out records with it)."""
    aggregates: tuple[int, ...] = ()
    """Sequence numbers in ``records`` that are KPL aggregates of several user records."""
    skipped: int = 0
    """KPL aggregates in this answer that held no user record (skipped)."""
    skipped_tail: SequenceKey | None = None
    """The last skipped aggregate's key when it comes after every record of ``records``:
    nothing handed out covers it, so the owner counts it done itself."""
    corrupt_aggregates: int = 0
    """Records with the KPL magic but a bad checksum or body, handed on whole."""
    seconds: float | None = None
    """How long this poll's GetRecords call took, answered or not (None: no call)."""
