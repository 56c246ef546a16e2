"""The shards whose next record failed or hung a task alone.

A plan that fails or hangs as a whole is cut down (:mod:`~kinesis_spout.spark.isolation`)
until a plan of one record fails alone. A retry plan's record is failed at once (its
payload is at hand). A read plan's record never reached the driver: its shard goes into
quarantine here, and its next plan is a *fetch plan* that reads that one record and
fails it unprocessed (retried, then dead-lettered), whatever the processing style; the
shard then reads on after it. A fetch that does not reach the record (a gap of empty
pages, throttling) moves the shard's position on, and the next plan fetches again.

A hang is searched for as reads are cut: once a read of a shard hangs, its next reads
take at most half as many records, halved again at each hang, until a read of one
record hangs (that record is quarantined), or the shard has read without a hang as many
records as the first hung read could hold, or up to its tip (a slow moment, not a
record). Each hang costs ``task_timeout``, so a search costs at most 1 + log2(limit).
"""

from __future__ import annotations

from dataclasses import dataclass

from kinesis_spout.records import ShardKey


@dataclass(slots=True)
class _Search:
    cap: int
    """The most records the shard's next reads take."""
    left: int
    """Records of the first hung read's range not read yet."""


class Quarantine:
    """The quarantined shards and the hang searches (see the module docstring)."""

    def __init__(self) -> None:
        self._suspects: dict[ShardKey, str] = {}
        self._searches: dict[ShardKey, _Search] = {}

    def suspect(self, key: ShardKey) -> str | None:
        """The error to fail the shard's next record with (None: not quarantined)."""
        return self._suspects.get(key)

    def quarantine(self, key: ShardKey, error: str) -> None:
        """The shard's next record failed a task alone (``error``): fetch and fail it."""
        self._suspects[key] = error

    def found(self, key: ShardKey) -> None:
        """The shard's quarantined record was read and failed: it reads at full size."""
        self._suspects.pop(key, None)
        self._searches.pop(key, None)

    @property
    def shards(self) -> frozenset[ShardKey]:
        """The shards in quarantine."""
        return frozenset(self._suspects)

    # ------------------------------------------------------------------ hangs
    def cap(self, key: ShardKey) -> int | None:
        """The most records the shard's next read may take (None: no search, no cap)."""
        search = self._searches.get(key)
        return None if search is None else search.cap

    def hung(self, key: ShardKey, limit: int, error: str) -> bool:
        """A read of at most ``limit`` records of the shard was given up. True when it was
        a read of one record: that record hangs alone, and is quarantined."""
        if limit <= 1:
            self.quarantine(key, error)
            return True
        search = self._searches.get(key)
        if search is None:
            self._searches[key] = _Search(limit // 2, limit)
        else:
            search.cap = max(min(search.cap, limit) // 2, 1)
        return False

    def read(self, key: ShardKey, n: int, caught_up: bool = False) -> None:
        """``n`` records of the shard were read and tracked; ``caught_up``: the read
        reached the shard's tip, so past everything the hung read could have held."""
        search = self._searches.get(key)
        if search is not None and (n or caught_up):
            search.left -= n
            if search.left <= 0 or caught_up:
                del self._searches[key]
