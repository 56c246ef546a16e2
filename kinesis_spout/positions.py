"""Positions in a shard as the streaming source writes them: in its offsets (Spark's
checkpoint location) and in the batch-end records of the checkpoint store
(:mod:`kinesis_spout.checkpoint.batch_ends`). Values with a canonical JSON form
(Spark compares offsets as text), pure, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kinesis_spout.config import InitialPosition
from kinesis_spout.errors import OffsetError
from tracker import SequenceKey


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
