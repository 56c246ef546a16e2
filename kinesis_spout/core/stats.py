"""The reader's counters as one snapshot, :class:`SpoutStats`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


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
