"""Metrics through an injected collector; the default does nothing.

The project reports each figure by a plain name (``records_acked``, ``in_flight``,
``get_records_seconds``, ...) with ``shard`` for a per-shard figure and ``stream`` for a
reader of several streams; a collector counts, sets or observes it
(:meth:`~MetricsCollector.increment`, :meth:`~MetricsCollector.gauge`,
:meth:`~MetricsCollector.observe`). The names, their meaning and their Prometheus export
(``metrics_port``): :mod:`kinesis_spout.observability.names` and ``docs/metrics.md``.
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
