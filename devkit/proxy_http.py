"""The HTTP side of :class:`~devkit.faultproxy.FaultProxy`: the request
handler (answers an injected fault, drops the connection, or forwards to the
upstream) and the threaded server that can cut every open connection."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol


class FaultPlan(Protocol):
    """What the HTTP side needs of :class:`~devkit.faultproxy.FaultProxy`
    (a protocol, so the two modules do not import each other)."""

    upstream_url: str
    _upstream_host: str
    _upstream_port: int
    _upstream_netloc: str

    def _decide(self, operation: str) -> str: ...

    def _denial(self, body: bytes) -> str | None: ...

    def _count(self, what: str, n: int = 1) -> None: ...

    def _record(self, operation: str, body: bytes) -> None: ...

    def _enter(self, operation: str) -> None: ...

    def _leave(self, operation: str) -> None: ...


log = logging.getLogger("devkit.faultproxy")

BEHIND_MS = 60_000
"""MillisBehindLatest of an injected ``empty`` page."""

_JSON = "application/x-amz-json-1.1"
_DATA_PLANE = frozenset(
    {"GetRecords", "GetShardIterator", "PutRecord", "PutRecords"}
    | {"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "TransactWriteItems"}
)
"""Calls throttled with ProvisionedThroughputExceededException (Kinesis's, and DynamoDB's
item calls when the proxy stands before a DynamoDB endpoint)."""
_STREAMED = frozenset({"SubscribeToShard"})
"""Answers passed through as they come (an event stream), not read whole first."""
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


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, Nagle plus the
    # client's delayed ACK add 40 ms to every answer.
    disable_nagle_algorithm = True
    server: ProxyServer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        log.debug("fault proxy: " + format, *args)

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        target = self.headers.get("X-Amz-Target", "")
        operation = target.rsplit(".", 1)[-1] if target else ""
        proxy = self.server.proxy
        proxy._record(operation, body)
        proxy._enter(operation)
        try:
            self._handle(proxy, operation, body)
        finally:
            proxy._leave(operation)

    def _handle(self, proxy: FaultPlan, operation: str, body: bytes) -> None:
        denied = proxy._denial(body)
        if denied is not None:
            self._answer(400, denied, f"{operation} refused (injected by the fault proxy)")
            return
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
        elif fault == "empty":
            self._empty_page(body)
        elif fault == "drop_before":
            self._drop()
        elif operation in _STREAMED and fault != "drop_after":
            self._forward_stream(body)
        else:
            self._forward(body, drop_after=fault == "drop_after")

    do_GET = do_POST  # noqa: N815 - health checks of some emulators

    def _empty_page(self, body: bytes) -> None:
        """A GetRecords answer with no records, far behind, the same iterator back."""
        iterator = json.loads(body or b"{}").get("ShardIterator")
        doc = {"Records": [], "NextShardIterator": iterator, "MillisBehindLatest": BEHIND_MS}
        payload = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", _JSON)
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

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
        if status == 200 and self.headers.get("X-Amz-Target", "").endswith(".GetRecords"):
            try:
                proxy._count("records_returned", len(json.loads(data)["Records"]))
            except (ValueError, KeyError, TypeError):
                log.debug("fault proxy: a GetRecords answer without Records")
        self.send_response(status)
        for k, v in out_headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _forward_stream(self, body: bytes) -> None:
        """Pass an event stream through as it comes; :meth:`ProxyServer.cut_streams`
        cuts it (a connection that drops mid-subscription)."""
        proxy = self.server.proxy
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Host"] = proxy._upstream_netloc
        headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection(proxy._upstream_host, proxy._upstream_port, timeout=60)
        self.server.streams_opened(self.connection, conn)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP_BY_HOP:
                    self.send_header(k, v)
            # Chunked, as Kinesis sends it: a cut shows as a body ended too early.
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            proxy._count("forwarded")
            while chunk := resp.read1(65536):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                proxy._count("stream_bytes", len(chunk))
            if self.server.was_cut(self.connection):
                raise OSError("cut by the fault proxy")
            self.wfile.write(b"0\r\n\r\n")
        except (OSError, http.client.HTTPException) as exc:
            self.close_connection = True
            log.debug("fault proxy: stream from %s ended: %s", proxy.upstream_url, exc)
        finally:
            self.server.streams_closed(self.connection)
            conn.close()


class ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], proxy: FaultPlan) -> None:
        self.proxy = proxy
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self._streams: dict[socket.socket, http.client.HTTPConnection] = {}
        self._cut: set[socket.socket] = set()
        super().__init__(address, ProxyHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            self._conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def streams_opened(self, client: socket.socket, upstream: http.client.HTTPConnection) -> None:
        with self._conns_lock:
            self._streams[client] = upstream

    def streams_closed(self, client: socket.socket) -> None:
        with self._conns_lock:
            self._streams.pop(client, None)
            self._cut.discard(client)

    def was_cut(self, client: socket.socket) -> bool:
        with self._conns_lock:
            return client in self._cut

    def cut_streams(self) -> int:
        """Cut every event stream being passed through (RST to the client, the upstream
        connection closed); the number cut."""
        with self._conns_lock:
            streams = list(self._streams.items())
            self._cut.update(self._streams)
        for client, upstream in streams:
            with contextlib.suppress(OSError):
                client.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                client.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                if upstream.sock is not None:
                    upstream.sock.shutdown(socket.SHUT_RDWR)
        return len(streams)

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
