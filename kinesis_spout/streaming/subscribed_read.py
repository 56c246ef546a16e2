"""An executor's first read of a shard for a batch by enhanced fan-out (``consumer=efo``).

The counterpart of :func:`~kinesis_spout.streaming.shard_reader.read_fresh`, the same
:func:`~kinesis_spout.streaming.shard_reader.first_read` over a subscribed getter: it
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

from kinesis_spout.kinesis.efo_read import EfoTarget, subscribed_getter
from kinesis_spout.records import Record, ShardPosition, StartPosition
from kinesis_spout.streaming.shard_reader import ReadAhead, first_read

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
    getter = subscribed_getter(
        target,
        shard_id,
        start=after.key if after is not None else None,
        after_whole=after is None or not after.partial,
        position=start.kind,
        timestamp=start.timestamp,
        limit=quota,
        closed=closed,
    )
    return first_read(getter, after, quota, cutoff=cutoff, seconds=seconds)
