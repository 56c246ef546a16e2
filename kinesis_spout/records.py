"""The package's value types: a record, a shard, positions in a shard and read outcomes.

One job, the value types, so one module even where it passes the 400-line guide: the
values that the whole package shares are said once, here, each with what it is in its
docstring; pure, no I/O, and no raw boto3 dictionary travels past the Kinesis adapter
(:mod:`kinesis_spout.kinesis`). docs/architecture.md ("Positions and read outcomes")
names every position and read outcome type of the package and where each lives.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kinesis_spout.config import InitialPosition
from kinesis_spout.errors import OffsetError
from tracker import SequenceKey

if TYPE_CHECKING:
    from kinesis_spout.errors import KinesisError


ShardKey = tuple[str, str]
"""``(stream name, shard id)``: a shard of a reader of one stream or several."""


def message_id(shard_id: str, key: SequenceKey, stream: str | None = None) -> str:
    """The Storm message id of a record: ``"<shardId>:<sequence>[:<sub>]"``, or with
    ``stream`` (a reader of several streams) ``"<stream>/<shardId>:<sequence>[:<sub>]"``."""
    mid = (
        f"{shard_id}:{key.sequence}:{key.sub_sequence}"
        if key.sub_sequence
        else (f"{shard_id}:{key.sequence}")
    )
    return mid if stream is None else f"{stream}/{mid}"


def parse_message_id(mid: str) -> tuple[str | None, str, SequenceKey]:
    """Inverse of :func:`message_id`: ``(stream or None, shard id, key)``; ``ValueError``
    naming the id if malformed.

    Shard ids never contain ``:`` or ``/`` (they look like ``shardId-000000000003``), nor
    do stream names.
    """
    stream, sep, rest = mid.rpartition("/")
    parts = rest.split(":")
    if len(parts) not in (2, 3) or not parts[0] or (sep and not stream):
        raise ValueError(
            f"malformed message id {mid!r}: expected '[<stream>/]<shardId>:<sequence>[:<sub>]'"
        )
    try:
        sub = int(parts[2]) if len(parts) == 3 else 0
        return stream or None, parts[0], SequenceKey.parse(parts[1], sub)
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
    def stream(self) -> str:
        """The stream's name (``stream_name``): a job reading several routes by it."""
        return self.stream_name

    @property
    def message_id(self) -> str:
        """``"<shardId>:<sequence>[:<sub>]"``: the id used for ack/fail (a reader of
        several streams also takes ``"<stream>/<shardId>:..."``, :attr:`stream_message_id`)."""
        return message_id(self.shard_id, self.key)

    @property
    def stream_message_id(self) -> str:
        """``"<stream>/<shardId>:<sequence>[:<sub>]"``: the id naming the stream too."""
        return message_id(self.shard_id, self.key, self.stream_name)

    @property
    def shard_key(self) -> ShardKey:
        """``(stream, shard id)``."""
        return (self.stream_name, self.shard_id)


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


# --- positions in a shard --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A shard's saved position: "everything up to and including this key is done".

    What the checkpoint stores keep (:mod:`kinesis_spout.checkpoint`); a reader resumes
    after it, and children of a closed shard start once it says ``shard_end``."""

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
class ShardPosition:
    """Where one shard's read stands: the last user record included so far.

    An entry of a streaming offset and the end of a batch-end record, as JSON
    ``{"seq": "4959...", "sub": 3, "partial": true, "ended": true, "n": 9}``
    (``partial``/``ended`` only when true; no ``seq``/``sub``: ended before any record).
    """

    sequence: str | None = None
    """Sequence number of the last included record; ``None`` only for a shard
    that ended before any record of it was read."""
    sub_sequence: int = 0
    """The KPL sub-sequence number of that user record (0 for a plain record)."""
    partial: bool = False
    """More user records of the aggregate ``sequence`` follow ``sub_sequence``: the next
    read re-opens the shard *at* ``sequence`` (not after it)."""
    ended: bool = False
    """The shard is closed and every record of it is included: its children may start."""
    count: int = 0
    """User records added by the batch that set this position (a replay checks it
    reads exactly as many)."""

    def __post_init__(self) -> None:
        if self.sequence is None and (self.partial or not self.ended):
            raise ValueError("a position without a sequence must be ended and not partial")
        if self.partial and self.ended:
            raise ValueError("an ended shard cannot stop inside an aggregate")
        if self.sub_sequence < 0 or self.count < 0:
            raise ValueError("sub_sequence and count must be >= 0")

    @property
    def key(self) -> SequenceKey | None:
        """The ordering key of the last included user record."""
        if self.sequence is None:
            return None
        return SequenceKey(int(self.sequence), self.sub_sequence)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.sequence is not None:
            out["seq"] = self.sequence
            out["sub"] = self.sub_sequence
        if self.partial:
            out["partial"] = True
        if self.ended:
            out["ended"] = True
        out["n"] = self.count
        return out

    @classmethod
    def from_json(cls, doc: Any, where: str) -> ShardPosition:
        if not isinstance(doc, dict):
            raise OffsetError(f"{where}: expected an object, got {doc!r}")
        unknown = set(doc) - {"seq", "sub", "partial", "ended", "n"}
        if unknown:
            raise OffsetError(f"{where}: unknown keys {sorted(unknown)} in {doc!r}")
        seq, sub = doc.get("seq"), doc.get("sub", 0)
        partial, ended, count = doc.get("partial", False), doc.get("ended", False), doc.get("n")
        try:
            if seq is not None:
                SequenceKey.parse(seq, sub)
            elif "sub" in doc:
                raise ValueError("'sub' without 'seq'")
            if not isinstance(partial, bool) or not isinstance(ended, bool):
                raise ValueError("'partial' and 'ended' must be booleans")
            if isinstance(count, bool) or not isinstance(count, int):
                raise ValueError("'n' must be an integer")
            return cls(seq, sub, partial, ended, count)
        except ValueError as exc:
            raise OffsetError(f"{where}: {exc} in {doc!r}") from None


@dataclass(frozen=True, slots=True)
class StartPosition:
    """Where a shard with no position starts: TRIM_HORIZON or AT_TIMESTAMP.

    Never LATEST: "latest" read on an executor during a replay would be a
    different place, so the source pins LATEST to a timestamp first.
    """

    kind: InitialPosition = InitialPosition.TRIM_HORIZON
    timestamp: datetime | None = None
    """UTC; set exactly when ``kind`` is AT_TIMESTAMP."""

    def __post_init__(self) -> None:
        if self.kind is InitialPosition.LATEST:
            raise ValueError("a StartPosition is never LATEST: pin it to a timestamp")
        if (self.kind is InitialPosition.AT_TIMESTAMP) != (self.timestamp is not None):
            raise ValueError("AT_TIMESTAMP needs a timestamp, TRIM_HORIZON none")
        if self.timestamp is not None and self.timestamp.tzinfo is None:
            raise ValueError("the timestamp must be timezone-aware")

    def to_json(self) -> dict[str, Any]:
        if self.timestamp is None:
            return {"type": self.kind.value}
        return {"type": self.kind.value, "timestamp": self.timestamp.astimezone(UTC).isoformat()}

    @classmethod
    def from_json(cls, doc: Any) -> StartPosition:
        if not isinstance(doc, dict):
            raise OffsetError(f"offset 'start' must be an object, got {doc!r}")
        kind = doc.get("type")
        if kind == InitialPosition.TRIM_HORIZON.value and set(doc) == {"type"}:
            return cls()
        if kind == InitialPosition.AT_TIMESTAMP.value and set(doc) == {"type", "timestamp"}:
            try:
                ts = datetime.fromisoformat(str(doc["timestamp"]))
            except ValueError:
                raise OffsetError(f"offset 'start' has a bad timestamp: {doc!r}") from None
            if ts.tzinfo is None:
                raise OffsetError(f"offset 'start' timestamp has no time zone: {doc!r}")
            return cls(InitialPosition.AT_TIMESTAMP, ts.astimezone(UTC))
        raise OffsetError(
            f"offset 'start' must be {{'type': 'TRIM_HORIZON'}} or "
            f"{{'type': 'AT_TIMESTAMP', 'timestamp': ISO}}, got {doc!r}"
        )


@dataclass(frozen=True, slots=True)
class GetterPosition:
    """Where a shard getter's next read starts: its open iterator, the last key it
    returned and, before any, its initial position (see :mod:`kinesis_spout.kinesis.getter`).
    A Spark read task gets and returns one; without an iterator it is also where an
    enhanced fan-out subscription starts
    (:attr:`~kinesis_spout.kinesis.subscription.SubscriptionPump.resume`)."""

    iterator: str | None = None
    """An open shard iterator that continues right after ``after`` (None: open one)."""
    after: SequenceKey | None = None
    """The last key returned (at start: the checkpoint); None: nothing yet."""
    after_whole: bool = True
    """The Kinesis record of ``after`` is done whole: read on *after* its sequence
    number; False: *at* it, inside its KPL aggregate (sub-records ``<= after`` dropped)."""
    initial: InitialPosition = InitialPosition.TRIM_HORIZON
    """Where to start while ``after`` is None (a LATEST start becomes AT_TIMESTAMP of
    the first iterator or subscription once opened)."""
    timestamp: datetime | None = None
    """With ``initial`` AT_TIMESTAMP: the time to start at."""


# --- read outcomes ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShardBatch:
    """What one poll of a shard getter produced: at most one GetRecords answer
    (:meth:`~kinesis_spout.kinesis.getter.KinesisShardGetter.poll`) or the events a
    subscription buffered (:meth:`~kinesis_spout.kinesis.efo_getter.EfoShardGetter.poll`)."""

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


@dataclass(slots=True)
class ReadEnd:
    """How a read of one shard ended: where a next read goes on, and the facts of its
    pages that the reader's core applies (lineage, lag, KPL aggregates; one step,
    :meth:`~kinesis_spout.core.shardset.ShardSet.apply_end`). Filled in page by page
    (:meth:`add`) as the read goes: a bounded read (:mod:`kinesis_spout.kinesis.bounded`)
    of a Spark task or the streaming source, or one poll of the spout's own loop."""

    position: GetterPosition | None = None
    """Where a next read goes on (the getter's position at the end; after a ``cut``,
    past the records ``take`` left)."""
    taken: int = 0
    """User records taken."""
    last: SequenceKey | None = None
    """The key of the last record taken."""
    caught_up: bool = False
    """It reached the shard's tip (or, subscribed, nothing arrived within its budget)."""
    ended: bool = False
    """The shard is closed and its last record was read (and taken)."""
    cut: bool = False
    """``take`` took fewer records than a page held: the caller's bound ended it."""
    events: int = 0
    """Answers received (GetRecords answers, or subscription events)."""
    calls: int = 0
    """The getter's calls so far (GetRecords calls, answered or not; events taken)."""
    errors: list[KinesisError] = field(default_factory=list)
    """Retriable errors met, in order."""
    seconds: list[float] = field(default_factory=list)
    """How long each GetRecords call took."""
    behind: int | None = None
    """MillisBehindLatest of the last answer."""
    child_shards: tuple[ShardInfo, ...] = ()
    """The child shards named by the last page of a closed shard."""
    aggregates: tuple[int, ...] = ()
    """Sequence numbers of the multi-record KPL aggregates taken."""
    skipped: int = 0
    """KPL aggregates that held no user record (skipped)."""
    skipped_tail: SequenceKey | None = None
    """The last skipped aggregate's key when it comes after every record taken."""
    corrupt: int = 0
    """Records with the KPL magic but a bad checksum or body, handed on whole."""
    stopped_by_error: bool = False
    """A retriable error ended it (``stop_on_error``)."""
    failure: str | None = None
    """An error of the read (not of a record: the stream deleted, access denied, a KMS
    key disabled) that ended it, said in one line; its kind is :attr:`failure_kind`."""
    failure_kind: str | None = None
    """The class name of that error (``StreamNotFoundError``, ``CredentialsError`` ...)."""

    def add_call(self, page: ShardBatch) -> None:
        """Fold in how ``page``'s call went: its duration and its error."""
        if page.seconds is not None:
            self.seconds.append(page.seconds)
        if page.error is not None:
            self.errors.append(page.error)

    def add(self, page: ShardBatch, taken: int | None = None) -> None:
        """Fold in what an answered ``page`` said, ``taken`` of its records (None: all)."""
        n = len(page.records) if taken is None else taken
        self.events += 1
        self.behind = page.millis_behind_latest
        if page.child_shards:
            self.child_shards = page.child_shards
        if page.aggregates:
            last_seq = page.records[n - 1].key.sequence if n else -1
            self.aggregates += tuple(a for a in page.aggregates if a <= last_seq)
        self.skipped += page.skipped
        self.corrupt += page.corrupt_aggregates
        if page.skipped_tail is not None and n == len(page.records):
            self.skipped_tail = page.skipped_tail
        elif n:
            self.skipped_tail = None  # records came after it: they cover it
        if n:
            self.taken += n
            self.last = page.records[n - 1].key

    def then(self, more: ReadEnd) -> None:
        """This read went on as ``more`` (a read again from where it stopped): ``more``'s
        position and end, both reads' records and calls."""
        self.position, self.ended, self.behind = more.position, more.ended, more.behind
        self.caught_up, self.cut = more.caught_up, more.cut
        self.child_shards = more.child_shards or self.child_shards
        self.aggregates += more.aggregates
        self.taken += more.taken
        self.last = more.last or self.last
        self.skipped += more.skipped
        self.corrupt += more.corrupt
        self.skipped_tail = (
            more.skipped_tail if more.taken or more.skipped_tail else self.skipped_tail
        )
        self.events += more.events
        self.calls += more.calls
        self.errors += more.errors
        self.seconds += more.seconds
        self.failure, self.failure_kind = more.failure, more.failure_kind

    @classmethod
    def of_page(cls, page: ShardBatch) -> ReadEnd:
        """One poll of a getter as a read: its call, its page's facts, every record taken."""
        end = cls(ended=page.ended)
        end.add_call(page)
        if page.called:
            end.add(page)
        return end
