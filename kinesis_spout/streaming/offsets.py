"""Streaming offsets of the Kinesis source, and batch planning: pure, no I/O.

An offset says, per shard, the last user record that batches up to this one
include. Spark stores offsets as JSON in its checkpoint location and hands
them back after a restart, so the JSON must round-trip exactly and be
canonical (Spark compares offsets as strings to decide "no new data")::

    {"version": 1,
     "stream": "orders",
     "start": {"type": "TRIM_HORIZON"},              # or AT_TIMESTAMP + "timestamp"
     "shards": {
       "shardId-000000000000": {"seq": "4959...", "sub": 0, "n": 250},
       "shardId-000000000001": {"seq": "4959...", "sub": 3, "partial": true, "n": 9},
       "shardId-000000000002": {"seq": "4959...", "sub": 0, "ended": true, "n": 0}}}

* ``seq``/``sub``: the key of the last included user record (``sub`` is the
  KPL sub-sequence number, 0 for a plain record). Everything up to and
  including it is in this or an earlier batch.
* ``partial``: the KPL aggregate ``seq`` has more user records after ``sub``,
  so the next batch re-opens the shard *at* ``seq`` instead of *after* it.
* ``ended``: the shard is closed and every record of it is included; its
  children may start in the next batch. Kept while ListShards still lists
  the shard, so it is never mistaken for a shard not yet started.
* ``n``: how many user records the batch that set this position added; the
  executors check a replay reads exactly as many.
* A shard with no entry has not started: it starts at ``start``, which is
  deterministic (LATEST is pinned to a timestamp when the query starts).

Resharding: a shard is read only once each of its parents that ListShards
still returns is ``ended`` in the *start* offset of the batch, so all of a
parent's records land in earlier batches than any of its children's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kinesis_spout.errors import OffsetError
from kinesis_spout.positions import ShardPosition, StartPosition
from kinesis_spout.records import ShardInfo
from tracker import SequenceKey

OFFSET_VERSION = 1


@dataclass(frozen=True, slots=True)
class SourceOffset:
    """Every shard's position after one batch (see the module docstring)."""

    stream_name: str
    start: StartPosition
    shards: Mapping[str, ShardPosition] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Canonical JSON-able dict: fixed key order, shards sorted by id."""
        return {
            "version": OFFSET_VERSION,
            "stream": self.stream_name,
            "start": self.start.to_json(),
            "shards": {s: self.shards[s].to_json() for s in sorted(self.shards)},
        }

    @classmethod
    def from_json(cls, doc: Any) -> SourceOffset:
        """Parse what :meth:`to_json` produced; :class:`OffsetError` otherwise."""
        if not isinstance(doc, dict):
            raise OffsetError(f"a Kinesis source offset must be an object, got {doc!r:.200}")
        if doc.get("version") != OFFSET_VERSION:
            raise OffsetError(
                f"Kinesis source offset version {doc.get('version')!r} is not supported "
                f"(this version reads {OFFSET_VERSION}): was the checkpoint location written "
                "by another source?"
            )
        stream = doc.get("stream")
        if not isinstance(stream, str) or not stream:
            raise OffsetError(f"offset 'stream' must be a stream name, got {stream!r}")
        shards = doc.get("shards")
        if not isinstance(shards, dict):
            raise OffsetError(f"offset 'shards' must be an object, got {shards!r:.200}")
        return cls(
            stream,
            StartPosition.from_json(doc.get("start")),
            {
                str(s): ShardPosition.from_json(p, f"offset of {stream}/{s}")
                for s, p in shards.items()
            },
        )

    def updated(
        self, positions: Mapping[str, ShardPosition], drop: Iterable[str] = ()
    ) -> SourceOffset:
        """A copy with ``positions`` set and the shards in ``drop`` removed."""
        shards = dict(self.shards)
        for s in drop:
            shards.pop(s, None)
        shards.update(positions)
        return replace(self, shards=shards)


# --- planning -------------------------------------------------------------------------


def ready_shards(listed: Sequence[ShardInfo], offset: SourceOffset) -> list[str]:
    """Shards to read ahead from ``offset``, sorted by id.

    A listed shard is ready when it is not ended and either has a position
    already, or each of its parents that is still listed is ended in
    ``offset`` (a parent ListShards no longer returns has expired: nothing of
    it is left to read).
    """
    listed_ids = {s.shard_id for s in listed}
    ready = []
    for shard in sorted(listed, key=lambda s: s.shard_id):
        pos = offset.shards.get(shard.shard_id)
        if pos is not None:
            if not pos.ended:
                ready.append(shard.shard_id)
            continue
        parents = [p for p in shard.parents if p in listed_ids]
        if all((pp := offset.shards.get(p)) is not None and pp.ended for p in parents):
            ready.append(shard.shard_id)
    return ready


def vanished(listed: Sequence[ShardInfo], offset: SourceOffset) -> list[str]:
    """Shards with a position that is not ended but that ListShards no longer
    returns: their remaining records expired before they were read."""
    listed_ids = {s.shard_id for s in listed}
    return sorted(s for s, p in offset.shards.items() if not p.ended and s not in listed_ids)


def expired_ended(listed: Sequence[ShardInfo], offset: SourceOffset) -> list[str]:
    """Ended shards ListShards no longer returns: safe to drop from the offset."""
    listed_ids = {s.shard_id for s in listed}
    return sorted(s for s, p in offset.shards.items() if p.ended and s not in listed_ids)


def split_quota(
    shard_ids: Sequence[str], per_shard: int, total: int | None, rotate: int = 0
) -> dict[str, int]:
    """Records each shard may add to one batch.

    Each gets ``per_shard`` at most; with a ``total`` (a ``ReadMaxRows``
    limit) it is shared evenly, the remainder going to the first shards after
    rotating the order by ``rotate`` (so no shard starves when ``total`` is
    smaller than the number of shards). Shards with a quota of 0 are left out.

    >>> split_quota(["a", "b", "c"], 100, 7)
    {'a': 3, 'b': 2, 'c': 2}
    """
    if per_shard < 1:
        raise ValueError("per_shard must be >= 1")
    ids = list(shard_ids)
    if total is None:
        return dict.fromkeys(ids, per_shard)
    if not ids:
        return {}
    k = rotate % len(ids)
    order = ids[k:] + ids[:k]
    base, extra = divmod(max(total, 0), len(ids))
    quotas = {s: min(per_shard, base + (1 if i < extra else 0)) for i, s in enumerate(order)}
    return {s: quotas[s] for s in ids if quotas[s] > 0}


@dataclass(frozen=True, slots=True)
class ShardRange:
    """The part of one shard one batch reads: after ``after`` (or from
    ``start`` when ``None``) up to and including ``last``."""

    shard_id: str
    after: ShardPosition | None
    start: StartPosition
    last: ShardPosition

    @property
    def after_key(self) -> SequenceKey | None:
        return self.after.key if self.after is not None else None

    @property
    def last_key(self) -> SequenceKey:
        key = self.last.key
        assert key is not None  # plan_ranges only builds ranges that read something
        return key


def plan_ranges(start: SourceOffset, end: SourceOffset) -> list[ShardRange]:
    """One range per shard whose position moved between ``start`` and ``end``
    and that has records to read, sorted by shard id.

    ``end`` must have been computed from ``start`` (Spark's contract), so
    each moved position's ``count`` describes exactly this range.
    """
    if start.stream_name != end.stream_name:
        raise OffsetError(
            f"batch offsets name two streams: {start.stream_name!r} and {end.stream_name!r}"
        )
    ranges = []
    for shard_id in sorted(end.shards):
        last = end.shards[shard_id]
        before = start.shards.get(shard_id)
        last_key = last.key
        if last == before or last_key is None or last.count == 0:
            continue
        if before is not None and (
            before.ended or (before.key is not None and before.key >= last_key)
        ):
            raise OffsetError(
                f"offset of {end.stream_name}/{shard_id} moves backwards: "
                f"{before.to_json()} -> {last.to_json()}"
            )
        after = before if before is not None and before.sequence is not None else None
        ranges.append(ShardRange(shard_id, after, end.start, last))
    return ranges
