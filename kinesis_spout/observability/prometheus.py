""":class:`PrometheusMetrics`: the project's metrics collector on a Prometheus registry.

It implements :class:`~kinesis_spout.metrics.MetricsCollector` by following
:mod:`kinesis_spout.observability.names`: each project name feeds one Prometheus
series (``records_acked`` with ``shard="s1"`` becomes
``kinesis_spout_records_total{stream,job,shard="s1",outcome="acked"}``). The
registry is the caller's (a fresh one per endpoint, so several spouts in one
process never clash); the endpoint serves it (:mod:`~kinesis_spout.observability.endpoint`).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kinesis_spout.observability.names import SPECS, Kind, MetricSpec, fallback

log = logging.getLogger(__name__)

GET_RECORDS_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Buckets of the GetRecords histogram: 5 ms to 10 s (a call may wait on a throttled shard)."""

_CLASSES: dict[Kind, Any] = {
    Kind.COUNTER: Counter,
    Kind.GAUGE: Gauge,
    Kind.AGE: Gauge,
    Kind.HISTOGRAM: Histogram,
}


class PrometheusMetrics:
    """A :class:`~kinesis_spout.metrics.MetricsCollector` that feeds Prometheus metrics.

    Thread-safe. ``stream`` and ``job`` label every series. ``clock`` (monotonic
    seconds) turns a reported age into an age at scrape time. A name that is not
    built in is exported under ``kinesis_spout_<name>``; a name used with the
    wrong kind (a counter set as a gauge) is dropped with a warning, once.

    ``names`` (default: every built-in name) are the names whose metrics are listed
    from the start, before any value (an endpoint passes its mode's,
    :data:`~kinesis_spout.observability.names.MODES`); another built-in name is
    listed from its first report.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        stream: str,
        job: str,
        buckets: Sequence[float] = GET_RECORDS_BUCKETS,
        clock: Callable[[], float] = time.monotonic,
        names: Collection[str] | None = None,
    ) -> None:
        self.registry = registry
        self.stream = stream
        self.job = job
        self._buckets = tuple(buckets)
        self._clock = clock
        self._lock = threading.Lock()
        self._specs: dict[str, MetricSpec] = {s.name: s for s in SPECS}
        self._families: dict[str, Any] = {}
        self._children: dict[tuple[str, Kind, str | None], Any] = {}
        """Per (name, kind used, shard): its series. The kind is in the key, so a name used
        with the wrong kind after its series exists is still dropped (not set on it)."""
        self._since: dict[str, float] = {}
        self._warned: set[str] = set()
        for spec in SPECS:
            if names is None or spec.name in names:
                self._family(spec)

    def for_stream(self, stream: str) -> PrometheusMetrics:
        """A collector into the same metrics whose series are labelled ``stream`` (each
        stream of a reader of several reports through its own)."""
        sibling = copy.copy(self)
        sibling.stream = stream
        sibling._children = {}
        sibling._since = {}
        return sibling

    # --- MetricsCollector ------------------------------------------------------------
    def increment(self, name: str, value: int = 1, *, shard: str | None = None) -> None:
        if value < 0:
            self._warn(name, f"a negative increment ({value})")
            return
        child = self._child(name, Kind.COUNTER, shard)
        if child is not None:
            child.inc(value)

    def gauge(self, name: str, value: float, *, shard: str | None = None) -> None:
        spec = self._specs.get(name)
        if spec is not None and spec.kind is Kind.AGE:
            self._set_age(spec, value)
            return
        child = self._child(name, Kind.GAUGE, shard)
        if child is not None:
            child.set(value * self._specs[name].scale)

    def observe(self, name: str, value: float, *, shard: str | None = None) -> None:
        child = self._child(name, Kind.HISTOGRAM, shard)
        if child is not None:
            child.observe(value * self._specs[name].scale)

    # --- internals -------------------------------------------------------------------
    def _family(self, spec: MetricSpec) -> Any:
        family = self._families.get(spec.family)
        if family is None:
            cls = _CLASSES[spec.kind]
            extra = {"buckets": self._buckets} if spec.kind is Kind.HISTOGRAM else {}
            family = cls(spec.family, spec.help, spec.label_names, registry=self.registry, **extra)
            self._families[spec.family] = family
        return family

    def _child(self, name: str, kind: Kind, shard: str | None) -> Any:
        key = (name, kind, shard)
        child = self._children.get(key)
        if child is not None:
            return child
        with self._lock:
            spec = self._specs.get(name)
            if spec is None:
                spec = self._specs[name] = fallback(name, kind)
            if spec.kind is not kind:
                self._warn(name, f"{kind.value} use of a {spec.kind.value}")
                return None
            labels = [self.stream, self.job]
            if spec.per_shard:
                labels.append(shard or "")
            labels += [v for _, v in spec.labels]
            try:
                child = self._family(spec).labels(*labels)
            except ValueError as exc:  # a user's name that clashes with a built-in family
                self._warn(name, f"a name clashing with another metric ({exc})")
                return None
            self._children[key] = child
        return child

    def _set_age(self, spec: MetricSpec, age: float) -> None:
        """An age reported now: the scrape shows it grown by the time since."""
        with self._lock:
            first = spec.name not in self._since
            self._since[spec.name] = self._clock() - age
        if first:
            child = self._family(spec).labels(self.stream, self.job)
            child.set_function(lambda: self._clock() - self._since[spec.name])

    def _warn(self, name: str, what: str) -> None:
        if name not in self._warned:
            self._warned.add(name)
            log.warning("metric %s: %s is not exported", name, what)
