"""Batch-end records: where each (batch, shard) read stopped, the checkpoint store's
second family beside the checkpoints (:func:`~kinesis_spout.checkpoint.factory.open_batch_ends`).

A read task records where it stopped under ``(batch id, shard)`` before it returns, first
writer wins, so a retried or speculative task reads exactly the same range; the next batch
starts from the recorded ends, and a commit removes the records below it (the store keeps
a *floor*, so a leftover attempt of a removed batch cannot record it again). The
streaming source and the Spark job both read this way
(:mod:`~kinesis_spout.checkpoint.recorded_read`). Records are kept per *run* (batch ids
restart in a new Spark checkpoint location), and each says what it was planned from
(:class:`PlannedFrom`): a record that does not match the batch's plan is refused. Offsets
of earlier releases have no run (``""``): their records sit directly under the batches'
directory or node. Layout and rules: docs/streaming-source.md and docs/checkpoints.md; the
backends: :mod:`~kinesis_spout.checkpoint.file_batch_ends` and
:mod:`~kinesis_spout.checkpoint.zk_batch_ends`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from kinesis_spout.errors import OffsetError
from kinesis_spout.records import ShardPosition, StartPosition


class BatchEndError(OffsetError):
    """A batch-end record is missing, corrupt, of another plan, or of a batch already
    removed (names the batch, the shard, the place)."""


class PlanOfShard(Protocol):
    """What :meth:`PlannedFrom.of` takes of a batch's plan for a shard (the streaming
    source's ``ShardPlan``)."""

    @property
    def position(self) -> ShardPosition | None: ...

    @property
    def quota(self) -> int: ...


@dataclass(frozen=True, slots=True)
class PlannedFrom:
    """What one (batch, shard) read was planned from: a record made for another plan
    (an earlier run of the query, another query with the same jobName) is refused."""

    run: str
    """The run id of the offsets (``""``: offsets of an earlier release)."""
    after: ShardPosition | None
    """The shard's position before the batch (``None``: it starts at ``start``)."""
    start: StartPosition
    quota: int

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "after": None if self.after is None else self.after.to_json(),
            "start": self.start.to_json(),
            "q": self.quota,
        }

    @classmethod
    def from_json(cls, doc: Any, where: str) -> PlannedFrom:
        if not isinstance(doc, dict) or set(doc) != {"run", "after", "start", "q"}:
            raise ValueError(f"'planned' must hold run, after, start and q, got {doc!r}")
        run, after, quota = doc["run"], doc["after"], doc["q"]
        if not isinstance(run, str):
            raise ValueError(f"'planned' run must be a string, got {run!r}")
        if isinstance(quota, bool) or not isinstance(quota, int) or quota < 0:
            raise ValueError(f"'planned' q must be an integer >= 0, got {quota!r}")
        position = None if after is None else ShardPosition.from_json(after, where)
        return cls(run, position, StartPosition.from_json(doc["start"]), quota)

    @classmethod
    def of(cls, run: str, plan: PlanOfShard, start: StartPosition) -> PlannedFrom:
        """What a batch of run ``run`` plans for a shard (``plan``)."""
        return cls(run, plan.position, start, plan.quota)

    def describe(self) -> str:
        origin = self.after.to_json() if self.after is not None else self.start.to_json()
        return f"run {self.run or '(none)'!r}, after {origin}, quota {self.quota}"


@dataclass(frozen=True, slots=True)
class BatchEnd:
    """Where one batch's read of one shard stopped."""

    position: ShardPosition | None
    """The last record included (``count``: how many this batch read), or ``None``:
    nothing read and the shard did not end (the next batch starts where this one did)."""
    caught_up: bool = False
    """The read reached the shard's tip (or the availableNow cutoff)."""
    throttled: bool = False
    """Kinesis kept refusing the read: the next batch waits a little for this shard."""
    at: float = 0.0
    """Wall time of the record (epoch seconds)."""
    children: tuple[str, ...] = ()
    """The shard ended: its child shards (lineage)."""
    reader: str = ""
    """``host:pid`` of the executor process that read it."""
    planned: PlannedFrom | None = None
    """What the read was planned from; ``None`` only in records of earlier releases."""
    iterator: str | None = None
    """A GetRecords iterator that goes on right after ``position`` (or, nothing read,
    after the empty pages the read walked), valid about 5 minutes: the next batch's
    first read of the shard goes on there instead of opening one at the position. It is
    how reads cross a gap of empty pages longer than one read's calls (Kinesis walks
    old, sparse data one empty page at a time), and a replay of that next batch starts
    from it too. ``None``: open one (the read stopped at a cut, the shard's end or an
    error; a subscription)."""

    @property
    def count(self) -> int:
        return self.position.count if self.position is not None else 0

    def to_json(self) -> dict[str, Any]:
        out = {
            "position": None if self.position is None else self.position.to_json(),
            "caught_up": self.caught_up,
            "throttled": self.throttled,
            "at": self.at,
            "children": list(self.children),
            "reader": self.reader,
        }
        if self.planned is not None:
            out["planned"] = self.planned.to_json()
        if self.iterator is not None:
            out["iterator"] = self.iterator
        return out

    @classmethod
    def from_json(cls, doc: Any, where: str) -> BatchEnd:
        try:
            if not isinstance(doc, dict) or set(doc) - {"planned", "iterator"} != {
                "position",
                "caught_up",
                "throttled",
                "at",
                "children",
                "reader",
            }:
                raise ValueError("not a batch-end record")
            planned = doc.get("planned")
            plan = None if planned is None else PlannedFrom.from_json(planned, where)
            pos = doc["position"]
            position = None if pos is None else ShardPosition.from_json(pos, where)
            flags = (doc["caught_up"], doc["throttled"])
            if not all(isinstance(f, bool) for f in flags):
                raise ValueError("caught_up and throttled must be booleans")
            children = doc["children"]
            if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
                raise ValueError("children must be a list of shard ids")
            reader = doc["reader"]
            if not isinstance(reader, str):
                raise ValueError("reader must be a string")
            iterator = doc.get("iterator")
            if iterator is not None and not isinstance(iterator, str):
                raise ValueError("iterator must be a string")
            return cls(
                position,
                flags[0],
                flags[1],
                float(doc["at"]),
                tuple(children),
                reader,
                plan,
                iterator,
            )
        except (ValueError, TypeError, OffsetError) as exc:
            raise BatchEndError(
                f"corrupt batch-end record at {where}: {exc}: {doc!r:.300}"
            ) from None


def check_planned(end: BatchEnd, expected: PlannedFrom, where: str) -> None:
    """Refuse (naming both) a record made for another plan than ``expected``. A record
    of an earlier release (no plan in it) is taken only under offsets of that release."""
    if end.planned == expected or (end.planned is None and expected.run == ""):
        return
    theirs = (
        end.planned.describe()
        if end.planned is not None
        else "an unknown plan (a record of an earlier release, with no run)"
    )
    raise BatchEndError(
        f"the batch-end record at {where} was planned from {theirs}, but this batch is "
        f"planned from {expected.describe()}: the record belongs to another run of the query "
        "or to another query with the same jobName and checkpointStore; refusing to use it "
        "(give each query its own jobName)"
    )


def removed_error(where: str, batch: int, floor: int) -> BatchEndError:
    return BatchEndError(
        f"batch {batch} was committed and its batch-end records removed (the store keeps "
        f"batches >= {floor}): this task attempt is a leftover and records nothing at {where}"
    )


class BatchEndStore(Protocol):
    """The batch-end records of one job's stream (:func:`~.factory.open_batch_ends`)."""

    def get(self, run: str, batch: int, shard: str) -> BatchEnd | None: ...

    def record(self, run: str, batch: int, shard: str, end: BatchEnd) -> BatchEnd:
        """Record ``end`` unless one is recorded already; the recorded one (first wins).
        :class:`BatchEndError` if ``batch`` is below the run's floor (already removed)."""
        ...

    def floor(self, run: str) -> int:
        """The lowest batch of ``run`` whose records are kept (0: none removed yet)."""
        ...

    def forget_before(self, run: str, batch: int) -> int:
        """Raise ``run``'s floor to ``batch``, then remove the records of batches before
        it; how many batches went."""
        ...

    def where(self, run: str, batch: int, shard: str) -> str: ...

    def close(self) -> None: ...


def encode_end(end: BatchEnd) -> bytes:
    """A record's bytes, as both backends store them (canonical JSON)."""
    return json.dumps(end.to_json(), separators=(",", ":"), sort_keys=True).encode("utf-8")


def decode_end(data: bytes, where: str) -> BatchEnd:
    """A stored record (a corrupt one raises :class:`BatchEndError` naming ``where``)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BatchEndError(f"corrupt batch-end record at {where}: not JSON ({exc})") from None
    return BatchEnd.from_json(doc, where)


def decode_floor(data: bytes, where: str) -> int:
    """A stored floor: the lowest batch kept, as decimal digits."""
    text = data.decode("utf-8", "replace").strip()
    if not text.isdigit():
        raise BatchEndError(f"corrupt batch-end floor at {where}: {text!r:.100}")
    return int(text)


def run_dir(run: str) -> str:
    """The directory or node of ``run``'s batches under the stream's batches (``""``
    for offsets of an earlier release: directly under them)."""
    return f"run-{run}" if run else ""
