"""Metrics through an injected collector; the default does nothing.

Names used by the project (``shard`` is passed for per-shard figures, ``stream`` by a
reader of several streams: None is the collector's own stream). How each
is exported to Prometheus (``metrics_port``) is in
:mod:`kinesis_spout.observability.names` and ``docs/metrics.md``.

========================  =====  ==============================================
name                      kind   meaning
========================  =====  ==============================================
records_read              count  records handed out for the first time
records_acked             count  acks that took effect
records_failed            count  fails that took effect (each retried or given up)
records_expired           count  records given up as older than ``max_record_age``, once written
retries                   count  retry deliveries (fast retries inside a batch included)
dead_lettered             count  records given up as out of retries, once written
dead_letter_errors        count  dead-letter writes that failed (retried before each save)
in_flight                 gauge  records emitted and not done (per shard)
millis_behind_latest      gauge  MillisBehindLatest of the last GetRecords (per shard)
checkpoint_age_seconds    gauge  seconds since the last successful checkpoint write
checkpoint_writes         count  checkpoint writes that took effect
checkpoint_store_errors   count  checkpoint store reads or writes that failed (retried)
get_records_seconds       obs    duration of each GetRecords call (answered or not)
kinesis_throttled         count  throttling answers from Kinesis
kinesis_errors            count  5xx answers and dropped connections
read_failures             count  reads refused (access denied, a KMS key): the shard pauses
rebalances                count  shard assignments recomputed (workers joined or left)
leases_acquired           count  shard leases taken by this worker
leases_released           count  shard leases given up after a flush
leases_lost               count  shard leases lost with an expired ZooKeeper session
iterators_expired         count  ExpiredIteratorException answers (the iterator is re-opened)
empty_aggregates_skipped  count  KPL aggregates that held no user record
corrupt_aggregates        count  records with the KPL magic but a bad body (handed on whole)
batches                   count  micro-batches of the Spark job (one per progress line)
========================  =====  ==============================================

``count`` names go through :meth:`~MetricsCollector.increment`, ``gauge`` ones through
:meth:`~MetricsCollector.gauge` and ``obs`` ones through :meth:`~MetricsCollector.observe`
(a value per event, for a histogram).

``records_acked``, ``dead_lettered`` and ``records_expired`` are disjoint: each
record is counted by one of them, once, when it is done (a given-up record when its
dead letter is written); their sum is the records done.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Protocol


class MetricsCollector(Protocol):
    def increment(
        self, name: str, value: int = 1, *, shard: str | None = None, stream: str | None = None
    ) -> None: ...

    def gauge(
        self, name: str, value: float, *, shard: str | None = None, stream: str | None = None
    ) -> None: ...

    def observe(
        self, name: str, value: float, *, shard: str | None = None, stream: str | None = None
    ) -> None:
        """One observation of a distribution (a duration in seconds, a size)."""
        ...


class NoopMetrics:
    """The default: drops everything."""

    def increment(
        self, name: str, value: int = 1, *, shard: str | None = None, stream: str | None = None
    ) -> None:
        return None

    def gauge(
        self, name: str, value: float, *, shard: str | None = None, stream: str | None = None
    ) -> None:
        return None

    def observe(
        self, name: str, value: float, *, shard: str | None = None, stream: str | None = None
    ) -> None:
        return None


class InMemoryMetrics:
    """Keeps counters and last gauge values; for tests and progress lines. Keyed by
    ``(name, shard)``; :attr:`streams` counts each counter by stream too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counters: dict[tuple[str, str | None], int] = defaultdict(int)
        self.gauges: dict[tuple[str, str | None], float] = {}
        self.observations: dict[tuple[str, str | None], list[float]] = defaultdict(list)
        self.streams: dict[tuple[str, str | None], int] = defaultdict(int)
        """Counters by ``(name, stream)`` (None: no stream said)."""

    def increment(
        self, name: str, value: int = 1, *, shard: str | None = None, stream: str | None = None
    ) -> None:
        with self._lock:
            self.counters[(name, shard)] += value
            self.streams[(name, stream)] += value

    def gauge(
        self, name: str, value: float, *, shard: str | None = None, stream: str | None = None
    ) -> None:
        with self._lock:
            self.gauges[(name, shard)] = value

    def observe(
        self, name: str, value: float, *, shard: str | None = None, stream: str | None = None
    ) -> None:
        with self._lock:
            self.observations[(name, shard)].append(value)

    def observed(self, name: str) -> list[float]:
        """Every observation of ``name``, over all shards."""
        with self._lock:
            return [v for (n, _), vs in self.observations.items() if n == name for v in vs]

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
