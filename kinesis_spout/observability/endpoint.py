"""The ``/metrics`` endpoint of one process: :class:`MetricsEndpoint`.

``metrics_port`` in the config turns it on (``metrics_host``, default
``127.0.0.1``, is where it listens). Each endpoint has its own Prometheus
registry with the project's metrics (:class:`PrometheusMetrics`) and the
process' own (CPU, memory, open files, garbage collections).

A port that is taken is a :class:`MetricsPortInUseError` naming the field and
the port, raised by :meth:`MetricsEndpoint.start` or :func:`check_port_free`;
every entry point calls one of them before it reads anything (a reader that takes the
job lease takes it first, so a second copy of a running job is named by its lease).
prometheus_client is imported only when an endpoint is made (the ``metrics``
extra).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from kinesis_spout.config import SpoutConfig
from kinesis_spout.errors import ConfigError

if TYPE_CHECKING:
    from kinesis_spout.observability.prometheus import PrometheusMetrics

log = logging.getLogger(__name__)

PATH = "/metrics"
FIELD = "metrics_port"


class MetricsPortInUseError(ConfigError):
    """The metrics port is taken by another process (or endpoint)."""


def _bind_error(host: str, port: int, exc: OSError) -> ConfigError:
    if exc.errno == errno.EADDRINUSE:
        return MetricsPortInUseError(
            FIELD,
            port,
            f"a free port: {host}:{port} is already in use by another process "
            "(pick another metrics_port, or leave it unset)",
        )
    return ConfigError(
        "metrics_host", host, f"an address this machine can listen on ({host}:{port}: {exc})"
    )


def check_port_free(config: SpoutConfig) -> None:
    """Raise :class:`MetricsPortInUseError` if ``metrics_port`` is taken (nothing if unset).

    For launchers that start the endpoint's process later (``kinesis-spout run``
    checks before ``spark-submit``); binds the way the endpoint will, then lets go.
    """
    port, host = config.metrics_port, config.metrics_host
    if not port:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server does
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise _bind_error(host, port, exc) from None


class MetricsEndpoint:
    """A Prometheus registry, its collector (:attr:`metrics`) and, once
    :meth:`start` ed, the HTTP server that serves it at ``/metrics``.

    ``mode`` is the kind of process (``spout``, ``worker``, ``spark``, ``streaming``:
    :data:`~kinesis_spout.observability.names.MODES`): the endpoint lists the metrics
    that kind of process reports, and no others.

    Make it before the objects that report into :attr:`metrics`, start it before
    reading anything (a taken port fails there), close it last.
    """

    def __init__(self, host: str, port: int, *, stream: str, job: str, mode: str = "spout") -> None:
        from kinesis_spout.observability.names import MODES

        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
        try:
            from prometheus_client import (
                CollectorRegistry,
                GCCollector,
                PlatformCollector,
                ProcessCollector,
            )

            from kinesis_spout.observability.prometheus import PrometheusMetrics
        except ImportError as exc:
            raise ConfigError(
                FIELD,
                port,
                f"needs prometheus_client ({exc}): the metrics extra "
                "(pip install prometheus_client)",
            ) from None
        self.host = host
        self.requested_port = port
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.mode = mode
        self.metrics: PrometheusMetrics = PrometheusMetrics(
            self.registry, stream=stream, job=job, names=MODES[mode]
        )
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @classmethod
    def of(cls, config: SpoutConfig, mode: str = "spout") -> MetricsEndpoint | None:
        """The endpoint ``config`` asks for (not started), or None (``metrics_port`` unset).
        ``mode``: the kind of process (:data:`~kinesis_spout.observability.names.MODES`),
        whose metrics it lists."""
        if config.metrics_port is None:
            return None
        return cls(
            config.metrics_host,
            config.metrics_port,
            stream=config.stream_name,
            job=config.job_name,
            mode=mode,
        )

    def start(self) -> Self:
        """Listen and serve (a daemon thread); a taken port raises
        :class:`MetricsPortInUseError`. Starting twice does nothing."""
        if self._server is not None:
            return self
        from prometheus_client import start_http_server

        try:
            self._server, self._thread = start_http_server(
                self.requested_port, self.host, self.registry
            )
        except OSError as exc:
            raise _bind_error(self.host, self.requested_port, exc) from None
        log.info("serving Prometheus metrics at %s", self.url)
        return self

    @property
    def port(self) -> int:
        """The port listened on (the one chosen for ``metrics_port = 0``)."""
        if self._server is None:
            return self.requested_port
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{PATH}"

    def close(self) -> None:
        """Stop serving and free the port (safe to call twice)."""
        if self._server is None:
            return
        port, server, self._server = self.port, self._server, None
        with contextlib.suppress(OSError):
            server.shutdown()
        with contextlib.suppress(OSError):  # apart: the port is let go whatever shutdown did
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        log.info("stopped the metrics endpoint on port %d", port)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
