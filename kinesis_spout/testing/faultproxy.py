"""A fault-injecting HTTP proxy for the Kinesis JSON API, on loopback.

No emulator throttles or fails on purpose, so tests and chaos runs put this
in front of one::

    with FaultProxy(moto.endpoint_url, throttle=0.1, error=0.05, drop=0.05,
                    expire=0.05, seed=7) as proxy:
        client = make_client(proxy.endpoint_url)
        ...
        assert proxy.injected.throttle > 0

For every request it draws one number from a seeded RNG and either forwards
the request untouched or injects one fault, with these probabilities (their
sum must be <= 1; rates can be changed while it runs):

* ``throttle``: a 400 ``ProvisionedThroughputExceededException`` (data-plane
  calls: GetRecords, GetShardIterator, PutRecord(s)) or
  ``LimitExceededException`` (every other call), without forwarding;
* ``error``: a 500 ``InternalFailure``, without forwarding;
* ``drop``: the connection is closed with no answer, either before the request
  is forwarded or after (the upstream did the work and the answer is lost);
  a second draw picks which, half and half;
* ``expire``: GetRecords only: a 400 ``ExpiredIteratorException``.

``operations`` limits injection to those API calls (names such as
``"GetRecords"``); others are always forwarded. With one client thread the
sequence of faults is a function of the seed. Counters of what was injected
are in :attr:`FaultProxy.injected`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import random
import socket
import threading
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

from kinesis_spout.errors import ConfigError

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
_JSON = "application/x-amz-json-1.1"
_DATA_PLANE = frozenset({"GetRecords", "GetShardIterator", "PutRecord", "PutRecords"})
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_RATES = ("throttle", "error", "drop", "expire")


@dataclass(frozen=True, slots=True)
class InjectedFaults:
    """What the proxy has injected so far (a snapshot)."""

    throttle: int = 0
    """400 ProvisionedThroughputExceededException / LimitExceededException answers."""
    error: int = 0
    """500 InternalFailure answers."""
    drop_before: int = 0
    """Connections closed before forwarding (the upstream never saw the request)."""
    drop_after: int = 0
    """Connections closed after forwarding (the upstream did the work)."""
    expire: int = 0
    """400 ExpiredIteratorException answers to GetRecords."""
    forwarded: int = 0
    """Requests forwarded and answered normally."""

    @property
    def total(self) -> int:
        """Faults injected (not counting normal forwards)."""
        return self.throttle + self.error + self.drop_before + self.drop_after + self.expire


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, Nagle plus the
    # client's delayed ACK add 40 ms to every answer.
    disable_nagle_algorithm = True
    server: _ProxyServer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        log.debug("fault proxy: " + format, *args)

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        target = self.headers.get("X-Amz-Target", "")
        operation = target.rsplit(".", 1)[-1] if target else ""
        proxy = self.server.proxy
        fault = proxy._decide(operation)
        if fault == "throttle":
            code = (
                "ProvisionedThroughputExceededException"
                if operation in _DATA_PLANE
                else "LimitExceededException"
            )
            self._answer(400, code, f"Rate exceeded ({operation}; injected by the fault proxy)")
        elif fault == "error":
            self._answer(500, "InternalFailure", "injected by the fault proxy")
        elif fault == "expire":
            self._answer(
                400,
                "ExpiredIteratorException",
                "Iterator expired (injected by the fault proxy)",
            )
        elif fault == "drop_before":
            self._drop()
        else:
            self._forward(body, drop_after=fault == "drop_after")

    do_GET = do_POST  # noqa: N815 - health checks of some emulators

    def _answer(self, status: int, code: str, message: str) -> None:
        payload = json.dumps({"__type": code, "message": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", _JSON)
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.send_header("x-amzn-ErrorType", code)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _drop(self) -> None:
        self.close_connection = True
        try:
            # RST instead of FIN: what a crashed peer or a middlebox looks like.
            self.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _forward(self, body: bytes, *, drop_after: bool) -> None:
        proxy = self.server.proxy
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Host"] = proxy._upstream_netloc
        headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection(proxy._upstream_host, proxy._upstream_port, timeout=60)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            status = resp.status
            out_headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP]
        except OSError as exc:
            log.debug("fault proxy: upstream %s failed: %s", proxy.upstream_url, exc)
            proxy._count("upstream_errors")
            self._answer(503, "ServiceUnavailable", f"upstream unreachable: {exc}")
            return
        finally:
            conn.close()
        if drop_after:
            self._drop()
            return
        proxy._count("forwarded")
        self.send_response(status)
        for k, v in out_headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], proxy: FaultProxy) -> None:
        self.proxy = proxy
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            self._conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Cut every open client connection (keep-alive ones included)."""
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that goes away mid-answer is normal here; keep the output quiet.
        log.debug("fault proxy: error serving %s", client_address, exc_info=True)


class FaultProxy:
    """A threaded HTTP forwarder on loopback that injects Kinesis faults.

    ``FaultProxy(upstream_url, throttle=0.0, error=0.0, drop=0.0, expire=0.0,
    seed=0)``; use it as a context manager (or ``start()`` / ``close()``).
    Rates are settable attributes (``proxy.throttle = 0.2``) or all at once
    with :meth:`set_rates`. Thread-safe.
    """

    def __init__(
        self,
        upstream_url: str,
        throttle: float = 0.0,
        error: float = 0.0,
        drop: float = 0.0,
        expire: float = 0.0,
        seed: int = 0,
        *,
        operations: Iterable[str] | None = None,
        port: int = 0,
    ) -> None:
        parts = urlsplit(upstream_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ConfigError("upstream_url", upstream_url, "an http://host:port URL")
        self.upstream_url = upstream_url
        self._upstream_host = parts.hostname
        self._upstream_port = parts.port or 80
        self._upstream_netloc = parts.netloc
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._rates = {"throttle": 0.0, "error": 0.0, "drop": 0.0, "expire": 0.0}
        self.set_rates(throttle=throttle, error=error, drop=drop, expire=expire)
        self.operations: frozenset[str] | None = (
            None if operations is None else frozenset(operations)
        )
        self._counts: Counter[str] = Counter()
        self._requests: Counter[str] = Counter()
        self._port = port
        self._server: _ProxyServer | None = None
        self._thread: threading.Thread | None = None

    # --- rates ------------------------------------------------------------
    def set_rates(
        self,
        *,
        throttle: float | None = None,
        error: float | None = None,
        drop: float | None = None,
        expire: float | None = None,
    ) -> None:
        """Change some rates at once (each in [0, 1], their sum <= 1)."""
        given = {"throttle": throttle, "error": error, "drop": drop, "expire": expire}
        with self._lock:
            new = dict(self._rates)
            for name, value in given.items():
                if value is None:
                    continue
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ConfigError(name, value, "a probability between 0 and 1")
                if not 0.0 <= value <= 1.0:
                    raise ConfigError(name, value, "a probability between 0 and 1")
                new[name] = float(value)
            if sum(new.values()) > 1.0 + 1e-9:
                raise ConfigError(
                    "throttle+error+drop+expire", sum(new.values()), "a sum of at most 1"
                )
            self._rates = new

    @property
    def throttle(self) -> float:
        return self._rates["throttle"]

    @throttle.setter
    def throttle(self, value: float) -> None:
        self.set_rates(throttle=value)

    @property
    def error(self) -> float:
        return self._rates["error"]

    @error.setter
    def error(self, value: float) -> None:
        self.set_rates(error=value)

    @property
    def drop(self) -> float:
        return self._rates["drop"]

    @drop.setter
    def drop(self, value: float) -> None:
        self.set_rates(drop=value)

    @property
    def expire(self) -> float:
        return self._rates["expire"]

    @expire.setter
    def expire(self, value: float) -> None:
        self.set_rates(expire=value)

    def clear_faults(self) -> None:
        """Set every rate to 0: forward everything from now on."""
        self.set_rates(throttle=0.0, error=0.0, drop=0.0, expire=0.0)

    # --- counters -------------------------------------------------------------
    @property
    def injected(self) -> InjectedFaults:
        """A snapshot of what was injected so far."""
        with self._lock:
            c = self._counts
            return InjectedFaults(
                throttle=c["throttle"],
                error=c["error"],
                drop_before=c["drop_before"],
                drop_after=c["drop_after"],
                expire=c["expire"],
                forwarded=c["forwarded"],
            )

    @property
    def requests(self) -> Mapping[str, int]:
        """Requests received, by API operation (a snapshot)."""
        with self._lock:
            return dict(self._requests)

    @property
    def upstream_errors(self) -> int:
        """Requests the upstream could not answer (answered 503)."""
        with self._lock:
            return self._counts["upstream_errors"]

    def reset_counts(self) -> None:
        with self._lock:
            self._counts.clear()
            self._requests.clear()

    def _count(self, what: str) -> None:
        with self._lock:
            self._counts[what] += 1

    def _decide(self, operation: str) -> str:
        """The fault for one request: a rate name, ``drop_before``/``drop_after``, or ``""``."""
        with self._lock:
            self._requests[operation] += 1
            if self.operations is not None and operation not in self.operations:
                return ""
            u = self._rng.random()
            r = self._rates
            fault = ""
            if u < r["throttle"]:
                fault = "throttle"
            elif u < r["throttle"] + r["error"]:
                fault = "error"
            elif u < r["throttle"] + r["error"] + r["drop"]:
                fault = "drop_before" if self._rng.random() < 0.5 else "drop_after"
            elif operation == "GetRecords" and u < sum(r.values()):
                fault = "expire"
            if fault:
                self._counts[fault] += 1
            return fault

    # --- lifecycle ------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FaultProxy is not started")
        return int(self._server.server_address[1])

    @property
    def endpoint_url(self) -> str:
        """Point the Kinesis client here."""
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> Self:
        if self._server is not None:
            return self
        self._server = _ProxyServer((LOOPBACK, self._port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fault-proxy-{self.port}",
            daemon=True,
        )
        self._thread.start()
        log.info("fault proxy %s -> %s", self.endpoint_url, self.upstream_url)
        return self

    def close(self) -> None:
        """Stop listening and cut open connections: clients see the endpoint go away."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
