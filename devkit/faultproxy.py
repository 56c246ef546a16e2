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
  calls: GetRecords, GetShardIterator, PutRecord(s); DynamoDB's item calls, for a
  proxy before a DynamoDB endpoint) or ``LimitExceededException`` (every other
  call), without forwarding;
* ``error``: a 500 ``InternalFailure``, without forwarding;
* ``drop``: the connection is closed with no answer, either before the request
  is forwarded or after (the upstream did the work and the answer is lost);
  a second draw picks which, half and half;
* ``expire``: GetRecords only: a 400 ``ExpiredIteratorException``;
* ``empty``: GetRecords only: an empty page that is far behind (no records,
  ``MillisBehindLatest`` 60000, the same iterator back), without forwarding:
  what real Kinesis answers over a gap in a shard or while reading old data.

:meth:`FaultProxy.deny` answers every call naming one stream with an error (a 400
``AccessDeniedException`` by default, or a ``KMSDisabledException`` ...): an IAM
policy or a KMS key that refuses that stream only, until :meth:`FaultProxy.allow`.

``operations`` limits injection to those API calls (names such as
``"GetRecords"``); others are always forwarded. ``SubscribeToShard`` answers
(event streams) are passed through as they come; :meth:`FaultProxy.cut_streams`
cuts the open ones (a connection dropping mid-subscription), and the request
bodies of those calls are kept (:meth:`FaultProxy.bodies`). With one client thread the
sequence of faults is a function of the seed. Counters of what was injected
are in :attr:`FaultProxy.injected`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import random
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

from devkit.proxy_http import ProxyServer
from kinesis_spout.errors import ConfigError

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
_RATES = ("throttle", "error", "drop", "expire", "empty")


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
    empty: int = 0
    """Empty GetRecords pages that were far behind."""
    forwarded: int = 0
    """Requests forwarded and answered normally."""

    @property
    def total(self) -> int:
        """Faults injected (not counting normal forwards)."""
        return (
            self.throttle
            + self.error
            + self.drop_before
            + self.drop_after
            + self.expire
            + self.empty
        )


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
        empty: float = 0.0,
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
        self._rates = dict.fromkeys(_RATES, 0.0)
        self.set_rates(throttle=throttle, error=error, drop=drop, expire=expire, empty=empty)
        self.operations: frozenset[str] | None = (
            None if operations is None else frozenset(operations)
        )
        self._counts: Counter[str] = Counter()
        self._requests: Counter[str] = Counter()
        self._bodies: list[tuple[str, bytes]] = []
        self._in_flight: Counter[str] = Counter()
        self._most_in_flight: Counter[str] = Counter()
        self._denied: dict[str, str] = {}
        self._port = port
        self._server: ProxyServer | None = None
        self._thread: threading.Thread | None = None

    # --- rates ------------------------------------------------------------
    def set_rates(
        self,
        *,
        throttle: float | None = None,
        error: float | None = None,
        drop: float | None = None,
        expire: float | None = None,
        empty: float | None = None,
    ) -> None:
        """Change some rates at once (each in [0, 1], their sum <= 1)."""
        given = {
            "throttle": throttle,
            "error": error,
            "drop": drop,
            "expire": expire,
            "empty": empty,
        }
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
                raise ConfigError("+".join(_RATES), sum(new.values()), "a sum of at most 1")
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

    def deny(self, stream: str, code: str = "AccessDeniedException") -> None:
        """Answer every call that names ``stream`` (by ``StreamName``, an ARN ending in
        ``/<stream>``, or a moto shard iterator) with a 400 ``code``, from now on."""
        with self._lock:
            self._denied[stream] = code

    def allow(self, stream: str) -> None:
        """Stop denying ``stream``."""
        with self._lock:
            self._denied.pop(stream, None)

    def _denial(self, body: bytes) -> str | None:
        """The error code for a call naming a denied stream (None: not denied)."""
        with self._lock:
            denied = dict(self._denied)
        if not denied:
            return None
        named = _streams_named(body)
        for stream, code in denied.items():
            if stream in named:
                with self._lock:
                    self._counts["denied"] += 1
                return code
        return None

    def clear_faults(self) -> None:
        """Set every rate to 0: forward everything from now on."""
        self.set_rates(throttle=0.0, error=0.0, drop=0.0, expire=0.0, empty=0.0)

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
                empty=c["empty"],
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
            self._most_in_flight.clear()

    def most_in_flight(self, operation: str) -> int:
        """The most ``operation`` requests that were being answered at once."""
        with self._lock:
            return self._most_in_flight[operation]

    @property
    def records_returned(self) -> int:
        """Records in the GetRecords answers forwarded to the clients (before KPL
        de-aggregation): what the readers fetched."""
        with self._lock:
            return self._counts["records_returned"]

    def bodies(self, operation: str) -> list[dict[str, object]]:
        """The JSON bodies of the ``SubscribeToShard`` requests received, oldest first."""
        with self._lock:
            return [json.loads(b) for op, b in self._bodies if op == operation]

    def cut_streams(self) -> int:
        """Cut every event stream passing through now; the number cut."""
        if self._server is None:
            raise RuntimeError("FaultProxy is not started")
        return self._server.cut_streams()

    def _record(self, operation: str, body: bytes) -> None:
        if operation == "SubscribeToShard":
            with self._lock:
                self._bodies.append((operation, body))

    def _enter(self, operation: str) -> None:
        with self._lock:
            self._in_flight[operation] += 1
            most = self._most_in_flight
            most[operation] = max(most[operation], self._in_flight[operation])

    def _leave(self, operation: str) -> None:
        with self._lock:
            self._in_flight[operation] -= 1

    def _count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self._counts[what] += n

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
            elif operation == "GetRecords" and u < sum(r.values()) - r["empty"]:
                fault = "expire"
            elif operation == "GetRecords" and u < sum(r.values()):
                fault = "empty"
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
        self._server = ProxyServer((LOOPBACK, self._port), self)
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


def _streams_named(body: bytes) -> set[str]:
    """The stream names a request body names: ``StreamName``, the last part of
    ``StreamARN`` (or a consumer ARN's stream), and a moto shard iterator's stream."""
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return set()
    if not isinstance(doc, dict):
        return set()
    names = set()
    if isinstance(doc.get("StreamName"), str):
        names.add(doc["StreamName"])
    for key in ("StreamARN", "ConsumerARN"):
        arn = doc.get(key)
        if isinstance(arn, str) and ":stream/" in arn:
            names.add(arn.split(":stream/", 1)[1].split("/", 1)[0])
    iterator = doc.get("ShardIterator")
    if isinstance(iterator, str):
        with contextlib.suppress(ValueError):  # UnicodeDecodeError is one
            names.add(base64.b64decode(iterator).decode().split(":", 1)[0])
    return names
