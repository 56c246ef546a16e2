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

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

from kinesis_spout.observability.names import SPECS, Kind, MetricSpec, fallback

log = logging.getLogger(__name__)
disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series

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
    from the start (an endpoint passes its mode's,
    :data:`~kinesis_spout.observability.names.MODES`); another built-in name is
    listed from its first report. Of those, the counters and histograms without a
    ``shard`` label have their series from the start, at 0, and the per-shard counters
    theirs from the first report of the shard, so a rate or an absence can be alerted
    on before the first event. No ``_created`` series (prometheus_client's are turned
    off for the process: they double the series and say nothing a counter's reset
    does not). A name whose spec has a ``deprecated`` family feeds that one too.
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
        self._children: dict[tuple[str, Kind, str, str | None], Any] = {}
        """Per (name, kind used, stream, shard): its series. The kind is in the key, so a
        name used with the wrong kind after its series exists is still dropped."""
        self._since: dict[tuple[str, str], float] = {}
        self._warned: set[str] = set()
        self._listed = [s for s in SPECS if names is None or s.name in names]
        self._seen: set[tuple[str, str | None]] = set()
        """``(stream, shard)`` (None: the stream itself) whose series started at 0."""
        for spec in self._listed:
            self._family(spec)
        self._start_at_zero(stream, None)

    def _start_at_zero(self, stream: str, shard: str | None) -> None:
        """The series of ``stream``'s listed counters (and histograms) with ``shard``
        (None: those without a shard label), at 0."""
        self._seen.add((stream, shard))
        for spec in self._listed:
            if spec.kind in (Kind.COUNTER, Kind.HISTOGRAM) and spec.per_shard == (
                shard is not None
            ):
                self._child(spec.name, spec.kind, stream, shard)

    def for_stream(self, stream: str) -> PrometheusMetrics:
        """A collector into the same metrics whose series are labelled ``stream`` (each
        stream of a reader of several reports through its own)."""
        sibling = copy.copy(self)
        sibling.stream = stream
        sibling._children = {}
        sibling._since = {}
        sibling._seen = set()
        sibling._start_at_zero(stream, None)
        return sibling

    # --- MetricsCollector ------------------------------------------------------------
    def increment(
        self, name: str, value: int = 1, *, shard: str | None = None, stream: str | None = None
    ) -> None:
        if value < 0:
            self._warn(name, f"a negative increment ({value})")
            return
        child = self._child(name, Kind.COUNTER, stream or self.stream, shard)
        if child is not None:
            child.inc(value)

    def gauge(
        self, name: str, value: float, *, shard: str | None = None, stream: str | None = None
    ) -> None:
        spec = self._specs.get(name)
        if spec is not None and spec.kind is Kind.AGE:
            self._set_age(spec, stream or self.stream, value)
            return
        child = self._child(name, Kind.GAUGE, stream or self.stream, shard)
        if child is not None:
            child.set(value * self._specs[name].scale)

    def observe(
        self, name: str, value: float, *, shard: str | None = None, stream: str | None = None
    ) -> None:
        child = self._child(name, Kind.HISTOGRAM, stream or self.stream, shard)
        if child is not None:
            child.observe(value * self._specs[name].scale)

    # --- internals -------------------------------------------------------------------
    def _family(self, spec: MetricSpec) -> Any:
        family = self._families.get(spec.family)
        if family is None:
            family = self._make_family(spec, spec.family, spec.help)
            if spec.deprecated:
                help_text = f"Deprecated: {spec.family} is its new name. {spec.help}"
                old = self._make_family(spec, spec.deprecated, help_text)
                family = _Pair(family, old)
            self._families[spec.family] = family
        return family

    def _make_family(self, spec: MetricSpec, name: str, help_text: str) -> Any:
        cls = _CLASSES[spec.kind]
        extra = {"buckets": self._buckets} if spec.kind is Kind.HISTOGRAM else {}
        return cls(name, help_text, spec.label_names, registry=self.registry, **extra)

    def _child(self, name: str, kind: Kind, stream: str, shard: str | None) -> Any:
        key = (name, kind, stream, shard)
        child = self._children.get(key)
        if child is not None:
            return child
        if (stream, None) not in self._seen:  # a stream's first report: its counters at 0
            self._start_at_zero(stream, None)
        if shard is not None and (stream, shard) not in self._seen:
            self._start_at_zero(stream, shard)  # the shard's first report: the same
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
            labels = [stream, self.job]
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

    def _set_age(self, spec: MetricSpec, stream: str, age: float) -> None:
        """An age reported now: the scrape shows it grown by the time since."""
        key = (spec.name, stream)
        with self._lock:
            first = key not in self._since
            self._since[key] = self._clock() - age
        if first:
            child = self._family(spec).labels(stream, self.job)
            child.set_function(lambda: self._clock() - self._since[key])

    def _warn(self, name: str, what: str) -> None:
        if name not in self._warned:
            self._warned.add(name)
            log.warning("metric %s: %s is not exported", name, what)


class _Pair:
    """A metric family under its name and its deprecated one: every call goes to both."""

    def __init__(self, new: Any, old: Any) -> None:
        self.new = new
        self.old = old

    def labels(self, *values: str) -> _Pair:
        return _Pair(self.new.labels(*values), self.old.labels(*values))

    def inc(self, value: float = 1) -> None:
        self.new.inc(value)
        self.old.inc(value)

    def set(self, value: float) -> None:
        self.new.set(value)
        self.old.set(value)

    def observe(self, value: float) -> None:
        self.new.observe(value)
        self.old.observe(value)

    def set_function(self, fn: Callable[[], float]) -> None:
        self.new.set_function(fn)
        self.old.set_function(fn)
