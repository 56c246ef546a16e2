"""Observability: the Prometheus endpoint (``metrics_port``) and what it exports.

* :mod:`~kinesis_spout.observability.names`: each project metric name and its
  Prometheus name, type, labels and meaning (pure; ``docs/metrics.md``);
* :mod:`~kinesis_spout.observability.prometheus`: :class:`PrometheusMetrics`, the
  :class:`~kinesis_spout.metrics.MetricsCollector` that feeds a Prometheus registry;
* :mod:`~kinesis_spout.observability.endpoint`: :class:`MetricsEndpoint`, the HTTP
  server of one process, and the port checks.

Only the last two import prometheus_client (the ``metrics`` extra).
"""

from __future__ import annotations

from kinesis_spout.observability.endpoint import (
    MetricsEndpoint,
    MetricsPortInUseError,
    check_port_free,
)

__all__ = ["MetricsEndpoint", "MetricsPortInUseError", "check_port_free"]
