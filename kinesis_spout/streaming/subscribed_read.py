"""An executor's first read of a shard for a batch by enhanced fan-out (``consumer=efo``).

The counterpart of :func:`~kinesis_spout.streaming.shard_reader.read_fresh`: it
subscribes after the batch's start position and takes events until the shard's
quota, its tip (an event not behind, or nothing within ``READ_SECONDS``), its end
or the availableNow cutoff, then closes the subscription. What it returns is the
same :class:`~kinesis_spout.streaming.shard_reader.ReadAhead` (the position of
its last record; a cut inside a KPL aggregate is kept as ``partial``), so the
batch-end record, the planner and a replay of the recorded range (by GetRecords,
:func:`~kinesis_spout.streaming.shard_reader.read_range`) work as with polling.
"""

from __future__ import annotations

from datetime import datetime

from kinesis_spout.kinesis.efo_read import EfoTarget, read_until, subscribed_getter
from kinesis_spout.positions import ShardPosition, StartPosition
from kinesis_spout.records import Record, ShardBatch
from kinesis_spout.streaming.shard_reader import ReadAhead, _position
from tracker import SequenceKey

READ_SECONDS = 5.0
"""Longest a first read stays subscribed (Kinesis sends an event at least every 5 s)."""


def read_fresh_subscribed(
    target: EfoTarget,
    shard_id: str,
    after: ShardPosition | None,
    start: StartPosition,
    quota: int,
    *,
    cutoff: datetime | None = None,
    closed: bool = False,
    seconds: float = READ_SECONDS,
) -> tuple[list[Record], ReadAhead]:
    """Up to ``quota`` user records of ``shard_id`` after ``after``, by subscription."""
    key = None
    if after is not None and after.sequence is not None:
        key = SequenceKey(int(after.sequence), after.sub_sequence)
    getter = subscribed_getter(
        target,
        shard_id,
        start=key,
        after_whole=after is None or not after.partial,
        position=start.kind,
        timestamp=start.timestamp,
        limit=quota,
        closed=closed,
    )
    kept: list[Record] = []
    cut = _Cut()

    def take(batch: ShardBatch) -> int:
        recs = batch.records
        n = len(recs)
        if cutoff is not None:
            n = next(
                (
                    i
                    for i, r in enumerate(recs)
                    if r.approximate_arrival is not None and r.approximate_arrival > cutoff
                ),
                n,
            )
        if n < len(recs):
            cut.at_cutoff = True
            cut.partial = n > 0 and recs[n].sequence_number == recs[n - 1].sequence_number
        kept.extend(recs[:n] if n < len(recs) else recs)
        if batch.child_shards:
            cut.children = tuple(c.shard_id for c in batch.child_shards)
        return n

    end = read_until(getter, quota, seconds, take)
    ended = getter.ended and not cut.at_cutoff
    partial = cut.partial if cut.at_cutoff else not getter.position.after_whole
    last = kept[-1] if kept else None
    position = _position(after, last, len(kept), partial and last is not None, ended)
    error = end.errors[-1] if end.errors and not end.events else None
    idle = cut.at_cutoff or end.caught_up
    return kept, ReadAhead(shard_id, position, idle, None, error, cut.children if ended else ())


class _Cut:
    """How the records taken were cut."""

    __slots__ = ("at_cutoff", "partial", "children")

    def __init__(self) -> None:
        self.at_cutoff = False
        self.partial = False
        self.children: tuple[str, ...] = ()
