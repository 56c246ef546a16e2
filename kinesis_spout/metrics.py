"""Metrics through an injected collector; the default does nothing.

Names used by the project (``shard`` is passed for per-shard figures):

========================  =====  ==============================================
name                      kind   meaning
========================  =====  ==============================================
records_read              count  records handed out for the first time
records_acked             count  acks that took effect
records_failed            count  fails that took effect
retries                   count  retry deliveries
dead_lettered             count  records given up and written to the dead-letter sink
in_flight                 gauge  records emitted and not done (per shard)
millis_behind_latest      gauge  MillisBehindLatest of the last GetRecords (per shard)
checkpoint_age_seconds    gauge  seconds since the last successful checkpoint write
checkpoint_writes         count  checkpoint writes that took effect
kinesis_throttled         count  throttling answers from Kinesis
kinesis_errors            count  5xx answers and dropped connections
rebalances                count  shard assignments recomputed (workers joined or left)
leases_acquired           count  shard leases taken by this worker
leases_released           count  shard leases given up after a flush
leases_lost               count  shard leases lost with an expired ZooKeeper session
iterators_expired         count  ExpiredIteratorException answers (the iterator is re-opened)
========================  =====  ==============================================
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Protocol


class MetricsCollector(Protocol):
    def increment(self, name: str, value: int = 1, *, shard: str | None = None) -> None: ...

    def gauge(self, name: str, value: float, *, shard: str | None = None) -> None: ...


class NoopMetrics:
    """The default: drops everything."""

    def increment(self, name: str, value: int = 1, *, shard: str | None = None) -> None:
        return None

    def gauge(self, name: str, value: float, *, shard: str | None = None) -> None:
        return None


class InMemoryMetrics:
    """Keeps counters and last gauge values; for tests and progress lines."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counters: dict[tuple[str, str | None], int] = defaultdict(int)
        self.gauges: dict[tuple[str, str | None], float] = {}

    def increment(self, name: str, value: int = 1, *, shard: str | None = None) -> None:
        with self._lock:
            self.counters[(name, shard)] += value

    def gauge(self, name: str, value: float, *, shard: str | None = None) -> None:
        with self._lock:
            self.gauges[(name, shard)] = value

    def count(self, name: str, shard: str | None = None) -> int:
        """A counter; with ``shard=None`` the sum over all shards and the total."""
        with self._lock:
            if shard is not None:
                return self.counters.get((name, shard), 0)
            return sum(v for (n, _), v in self.counters.items() if n == name)

    def gauge_value(self, name: str, shard: str | None = None) -> float | None:
        with self._lock:
            return self.gauges.get((name, shard))

    def gauge_values(self, name: str) -> dict[str | None, float]:
        with self._lock:
            return {s: v for (n, s), v in self.gauges.items() if n == name}
