"""Where the streaming source's reads stopped, as its offset process learns it (no PySpark).

Per batch and (stream, shard), the batch-end record the shard's task left in the
checkpoint store (:mod:`~kinesis_spout.checkpoint.batch_ends`), checked against the
batch's plan and read once. A shard with no record keeps the position the batch
planned it from, decided once per batch so that the next batch's plan and this batch's
commit agree. What a record says paces the shard: one that reached its tip rests for
``idle_poll_interval``, a throttled one for :data:`THROTTLE_REST`; under availableNow a
shard at its tip after the cutoff is done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime

from kinesis_spout.checkpoint.batch_ends import BatchEnd, BatchEndStore, PlannedFrom, check_planned
from kinesis_spout.records import ShardKey
from kinesis_spout.streaming.batch_offset import BatchOffset, StreamsOffset

log = logging.getLogger(__name__)

THROTTLE_REST = 1.0
"""Seconds a shard whose last read was throttled waits for its next quota."""


class ShardEnds:
    """The batch-end records of the batches not yet committed, and the rests they set
    (see the module docstring)."""

    def __init__(self, store: Callable[[str], BatchEndStore], idle_rest: float) -> None:
        self._store = store
        """A stream's batch-end records, by name."""
        self._idle_rest = idle_rest
        self.cutoff: datetime | None = None
        """availableNow: records that arrived later are not read."""
        self._ends: dict[int, dict[ShardKey, BatchEnd]] = {}
        self._unread: dict[int, set[ShardKey]] = {}
        """Per batch, the shards whose read was not recorded."""
        self._rest_until: dict[ShardKey, float] = {}
        """Wall time before which a shard gets no quota."""
        self._done: set[ShardKey] = set()
        """availableNow: shards read up to the cutoff."""

    def of(self, offset: StreamsOffset) -> dict[ShardKey, BatchEnd]:
        """The batch-end record of every shard ``offset`` read; corrupt or other plans'
        ones are errors. A shard with no record is left out: its read never ran."""
        known = self._ends.setdefault(offset.batch, {})
        unread = self._unread.setdefault(offset.batch, set())
        for stream, part in offset.parts.items():
            missing = []
            for shard, plan in part.reads.items():
                key = (stream, shard)
                if key in known or key in unread:
                    continue
                store = self._store(stream)
                end = store.get(part.run, part.batch, shard)
                if end is None:
                    unread.add(key)
                    missing.append(shard)
                    continue
                planned = PlannedFrom.of(part.run, plan, part.start)
                check_planned(end, planned, store.where(part.run, part.batch, shard))
                known[key] = end
                self._note(key, end, part.cutoff)
            if missing:
                self._unrecorded(part, missing)
        return known

    def _unrecorded(self, offset: BatchOffset, shards: list[str]) -> None:
        """Shards of a batch Spark ran without their read recorded. A task records before
        it returns any record, so their tasks never ran: the batch's function did not
        compute every partition (``df.show()``, ``limit(n)``, an early return), and no
        record of theirs reached it. (Were the records removed from the store instead,
        a record of theirs may also be in this batch: at-least-once.)"""
        where = self._store(offset.stream_name).where(offset.run, offset.batch, shards[0])
        log.warning(
            "batch %d of %s: no read recorded for shard(s) %s: their partitions did not run "
            "(the batch's function did not read the whole batch) or their records were "
            "removed from the store (the first one's: %s); the next batch reads them again "
            "from where batch %d started them",
            offset.batch,
            offset.stream_name,
            ", ".join(shards),
            where,
            offset.batch,
        )

    def _note(self, key: ShardKey, end: BatchEnd, read_cutoff: datetime | None) -> None:
        """Remember when the shard may read again (``read_cutoff``: the cutoff its read
        stopped at, if any)."""
        if end.position is not None and end.position.ended:
            return
        if end.throttled:
            self._rest_until[key] = end.at + THROTTLE_REST
        elif end.caught_up:
            cutoff = self.cutoff
            if (
                cutoff is not None
                and end.at >= cutoff.timestamp()
                and (read_cutoff is None or read_cutoff >= cutoff)
            ):
                # At its tip after the cutoff: everything that arrived before is read. (A
                # batch of an earlier query that caught up says nothing about this cutoff,
                # nor does one that stopped at an earlier query's older cutoff.)
                self._done.add(key)
            self._rest_until[key] = end.at + self._idle_rest
        else:
            self._rest_until.pop(key, None)

    def known(self, batch: int, key: ShardKey) -> BatchEnd | None:
        """The shard's record of ``batch`` if :meth:`of` read it (never a store call)."""
        return self._ends.get(batch, {}).get(key)

    def waiting(self, keys: Iterable[ShardKey]) -> list[ShardKey]:
        """The shards of ``keys`` not yet at the availableNow cutoff (all without one)."""
        return [k for k in keys if k not in self._done]

    def pollable(self, keys: Iterable[ShardKey], now: float) -> list[ShardKey]:
        """The shards of ``keys`` that do not rest at wall time ``now``."""
        return [k for k in keys if self._rest_until.get(k, 0.0) <= now]

    def wake(self, keys: Iterable[ShardKey]) -> float:
        """When the first of ``keys`` (every one resting) may read again."""
        return min(self._rest_until[k] for k in keys)

    def forget_before(self, end: StreamsOffset) -> None:
        """Drop the records of the batches before ``end``'s (committed), here and in
        each stream's store (a store error only logs: the next commit tries again)."""
        for stream in end.parts:
            try:
                self._store(stream).forget_before(end.run, end.batch)
            except Exception as exc:  # cleanup only
                log.warning(
                    "removing batch-end records of %s before batch %d: %s", stream, end.batch, exc
                )
        for b in [b for b in self._ends if b < end.batch]:
            del self._ends[b]
        for b in [b for b in self._unread if b < end.batch]:
            del self._unread[b]
