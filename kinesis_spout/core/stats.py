"""The reader's counters as one snapshot, :class:`SpoutStats`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
    """Seconds since the checkpoints were last known saved: a write, a round with nothing
    to write, or the open (None: not opened)."""
    ignored: int = 0
    """Acks and fails of unknown, released or already-done records (harmless)."""
    checkpoint_writes: int = 0
    """Checkpoint saves that took effect."""
    expired: int = 0
    """Records given up as older than ``max_record_age`` (also in ``dead_lettered``
    once written)."""

    def __str__(self) -> str:
        """The records, as a log line says them: read, acked, dead-lettered, in flight.
        Deliveries (fails, retries) are left to the caller's own summary: the Spark job
        retries inside its micro-batches, which this reader does not see."""
        expired = f" (expired {self.expired})" if self.expired else ""
        return (
            f"{self.read} read, {self.acked} acked, {self.dead_lettered} dead-lettered"
            f"{expired}, {self.in_flight} in flight; {self.checkpoint_writes} checkpoint writes"
        )


def spout_stats(
    partitions: Iterable[ShardPartition],
    rr: RoundRobin,
    acks: AckRouter,
    committer: Committer,
    now: float,
    several: bool = False,
) -> SpoutStats:
    """The snapshot of a reader made of these parts (``several`` streams: the lag of each
    shard keyed ``"<stream>/<shardId>"``)."""
    parts = sorted(partitions, key=lambda sh: sh.key)
    behind = {
        f"{sh.stream}/{sh.shard_id}" if several else sh.shard_id: sh.millis_behind_latest
        for sh in parts
        if sh.reading
    }
    age = None if committer.last_save is None else now - committer.last_save
    return SpoutStats(
        read=rr.read,
        acked=acks.acked,
        failed=acks.failed,
        retried=rr.retried,
        dead_lettered=acks.dead_lettered,
        in_flight=sum(sh.tracker.in_flight for sh in parts if sh.tracker is not None),
        millis_behind_latest=MappingProxyType(behind),
        checkpoint_age=age,
        ignored=acks.ignored,
        checkpoint_writes=committer.writes,
        expired=acks.expired,
    )
