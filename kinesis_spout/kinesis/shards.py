"""The shards of one stream, their lineage and their lifecycle.

:class:`ShardMap` is pure bookkeeping (no I/O, no clock): the spout feeds it ListShards
answers, ChildShards of GetRecords answers and the shard ends found in the checkpoint
store, and asks it which shards may start. A child starts only after every parent ended
(ENDED here, ``shard_end`` in the store, or no longer listed: trimmed, no readable data),
which keeps the order per partition key across a split or merge.

The states are :class:`~kinesis_spout.records.ShardState`; :func:`check_transition`
allows only the transitions of docs/reader.md ("How the reading works", the shard
lifecycle), plus WAITING or OPEN to ENDED when ``shard_end`` is found in the store
(another worker finished the shard).
"""

from __future__ import annotations

from collections.abc import Iterable

from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.records import ShardInfo, ShardState

_ALLOWED: frozenset[tuple[ShardState, ShardState]] = frozenset(
    {
        (ShardState.WAITING, ShardState.OPEN),
        (ShardState.WAITING, ShardState.ENDED),
        (ShardState.OPEN, ShardState.DRAINING),
        (ShardState.OPEN, ShardState.ENDED),
        (ShardState.DRAINING, ShardState.ENDED),
    }
)


def check_transition(shard_id: str, old: ShardState, new: ShardState) -> ShardState:
    """``new`` if ``old -> new`` is a lifecycle edge (or no change); else an error."""
    if old is new or (old, new) in _ALLOWED:
        return new
    raise KinesisSpoutError(f"shard {shard_id}: illegal state change {old.value} -> {new.value}")


def _shard_sort_key(shard_id: str) -> tuple[int, str]:
    tail = shard_id.rsplit("-", 1)[-1]
    return (int(tail), shard_id) if tail.isdigit() else (-1, shard_id)


class ShardMap:
    """Every shard of one stream this worker has heard of, and which have ended."""

    def __init__(self, shards: Iterable[ShardInfo] = ()) -> None:
        self._info: dict[str, ShardInfo] = {}
        self._ended: set[str] = set()
        self.update(shards)

    def update(self, shards: Iterable[ShardInfo]) -> list[ShardInfo]:
        """Merge a ListShards answer; returns the shards not known before.

        A known shard's entry is replaced (it may have been closed since), but
        lineage learnt from ChildShards is kept when ListShards omits it.
        """
        new: list[ShardInfo] = []
        for s in shards:
            old = self._info.get(s.shard_id)
            if old is None:
                new.append(s)
                self._info[s.shard_id] = s
            elif s != old:
                if not s.parents and old.parents:
                    s = ShardInfo(
                        s.shard_id,
                        old.parent_shard_id,
                        old.adjacent_parent_shard_id,
                        s.starting_sequence_number,
                        s.ending_sequence_number,
                    )
                self._info[s.shard_id] = s
        new.sort(key=lambda s: _shard_sort_key(s.shard_id))
        return new

    def add_children(self, children: Iterable[ShardInfo]) -> list[ShardInfo]:
        """Merge the ChildShards of a closed shard's last GetRecords answer."""
        return self.update(c for c in children if c.shard_id not in self._info)

    # --- ends ------------------------------------------------------------
    def mark_ended(self, shard_id: str) -> None:
        self._ended.add(shard_id)

    def is_ended(self, shard_id: str) -> bool:
        return shard_id in self._ended

    def parents_ended(self, shard_id: str) -> bool:
        """True if every parent of ``shard_id`` ended or is unknown (trimmed)."""
        return not self.pending_parents(shard_id)

    def pending_parents(self, shard_id: str) -> tuple[str, ...]:
        """The parents of ``shard_id`` that are known and have not ended."""
        info = self._info.get(shard_id)
        if info is None:
            return ()
        return tuple(p for p in info.parents if p in self._info and p not in self._ended)

    def has_known_parent(self, shard_id: str) -> bool:
        """True if a parent of ``shard_id`` is in the map (it continues a shard we read)."""
        info = self._info.get(shard_id)
        return info is not None and any(p in self._info for p in info.parents)

    # --- lookups ----------------------------------------------------------
    def __contains__(self, shard_id: object) -> bool:
        return shard_id in self._info

    def __len__(self) -> int:
        return len(self._info)

    def get(self, shard_id: str) -> ShardInfo | None:
        return self._info.get(shard_id)

    def infos(self) -> dict[str, ShardInfo]:
        """Every known shard, by id, in :meth:`ids` order."""
        return {s: self._info[s] for s in self.ids()}

    def ids(self) -> list[str]:
        """Every shard id, in shard-number order."""
        return sorted(self._info, key=_shard_sort_key)

    def children(self, shard_id: str) -> list[str]:
        """Shards that name ``shard_id`` as a parent."""
        return sorted(
            (s.shard_id for s in self._info.values() if shard_id in s.parents),
            key=_shard_sort_key,
        )
