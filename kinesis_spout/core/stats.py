"""The reader's counters as one snapshot, :class:`SpoutStats`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kinesis_spout.core.acks import AckRouter
from kinesis_spout.core.committer import Committer
from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.core.rotation import RoundRobin


@dataclass(frozen=True, slots=True)
class SpoutStats:
    """A snapshot of the spout's counters."""

    read: int
    """Records handed out for the first time."""
    acked: int
    """Acks that took effect."""
    failed: int
    """Fails (and message timeouts) that took effect."""
    retried: int
    """Retry deliveries handed out."""
    dead_lettered: int
    """Records written to the dead-letter sink."""
    in_flight: int
    """Records handed out and not done, over all shards (awaiting retries included)."""
    millis_behind_latest: Mapping[str, int | None] = field(default_factory=dict)
    """MillisBehindLatest of each owned shard's last GetRecords answer."""
    checkpoint_age: float | None = None
    """Seconds since the last successful checkpoint write (None: none yet)."""
    ignored: int = 0
    """Acks and fails of unknown, released or already-done records (harmless)."""
    checkpoint_writes: int = 0
    """Checkpoint saves that took effect."""
    expired: int = 0
    """Records given up as older than ``max_record_age`` (also in ``dead_lettered``
    once written)."""


def spout_stats(
    shards: Mapping[str, ShardPartition],
    rr: RoundRobin,
    acks: AckRouter,
    committer: Committer,
    now: float,
) -> SpoutStats:
    """The snapshot of a reader made of these parts."""
    behind = {
        s: sh.reader.getter.millis_behind_latest
        for s, sh in sorted(shards.items())
        if sh.reader is not None
    }
    age = None if committer.last_save is None else now - committer.last_save
    return SpoutStats(
        read=rr.read,
        acked=acks.acked,
        failed=acks.failed,
        retried=rr.retried,
        dead_lettered=acks.dead_lettered,
        in_flight=sum(sh.tracker.in_flight for sh in shards.values() if sh.tracker is not None),
        millis_behind_latest=MappingProxyType(behind),
        checkpoint_age=age,
        ignored=acks.ignored,
        checkpoint_writes=committer.writes,
        expired=acks.expired,
    )
