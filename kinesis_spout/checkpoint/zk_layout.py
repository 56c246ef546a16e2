"""The pure parts of the ZooKeeper store: its URL, its node layout, secret masking.

Node layout under the URL's root (see :mod:`kinesis_spout.checkpoint.zookeeper`)::

    /<root>/<job>/<stream>/<shardId>                 checkpoint JSON (codec.py), persistent
    /<root>/<job>/<stream>/@leases/<shardId>         lease epoch node, persistent
    /<root>/<job>/<stream>/@leases/<shardId>/holder  the lease itself, ephemeral
    /<root>/<job>/<stream>/@workers/<workerId>       live workers, ephemeral
    /<root>/<job>/<stream>/@batches/...              batch-end records (zk_batch_ends.py)
    /<root>/<job>/@job-lease                         the job lease, ephemeral
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass

from kinesis_spout.errors import ConfigError

_HOST_PORT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")


@dataclass(frozen=True, slots=True)
class ZkUrl:
    """A parsed ``zk://host:port[,host:port...]/root`` URL."""

    hosts: str
    """kazoo's host list: ``"h1:p1,h2:p2"``."""
    root: str
    """Normalised root path, ``"/a/b"``: every node this project writes is under it."""

    @classmethod
    def parse(cls, url: str) -> ZkUrl:
        """Parse and validate; :class:`ConfigError` names the URL and what is wrong."""
        allowed = "zk://host:port[,host:port...]/root, e.g. zk://127.0.0.1:2181/kinesis-spout"
        if not url.startswith("zk://"):
            raise ConfigError("checkpoint_store", url, allowed)
        rest = url[len("zk://") :]
        hosts, sep, path = rest.partition("/")
        if "@" in hosts:
            raise ConfigError(
                "checkpoint_store", _mask_userinfo(url), "no credentials in the URL; use zk_auth"
            )
        if not hosts or not all(_HOST_PORT.match(h) for h in hosts.split(",")):
            raise ConfigError("checkpoint_store", url, f"host:port pairs: {allowed}")
        for h in hosts.split(","):
            port = int(h.rsplit(":", 1)[1])
            if not 0 < port < 65536:
                raise ConfigError("checkpoint_store", url, f"a port between 1 and 65535 in {h!r}")
        parts = [p for p in path.split("/") if p]
        if not sep or not parts:
            raise ConfigError("checkpoint_store", url, f"a root path: {allowed}")
        if any(p in (".", "..") or p.startswith("@") for p in parts):
            raise ConfigError(
                "checkpoint_store", url, "a root path without '.', '..' or '@' segments"
            )
        return cls(hosts, "/" + "/".join(parts))

    def __str__(self) -> str:
        return f"zk://{self.hosts}{self.root}"


def _mask_userinfo(url: str) -> str:
    head, _, tail = url.partition("@")
    return "zk://***@" + tail if head.startswith("zk://") else "***"


@dataclass(frozen=True, slots=True)
class ZkPaths:
    """Where each node of one job lives (see the module docstring)."""

    root: str
    job: str

    @property
    def job_path(self) -> str:
        return f"{self.root}/{self.job}"

    def stream(self, stream: str) -> str:
        return f"{self.root}/{self.job}/{stream}"

    def checkpoint(self, stream: str, shard: str) -> str:
        return f"{self.stream(stream)}/{shard}"

    def leases(self, stream: str) -> str:
        return f"{self.stream(stream)}/@leases"

    def lease(self, stream: str, shard: str) -> str:
        """The persistent epoch node: its version counts acquisitions."""
        return f"{self.leases(stream)}/{shard}"

    def lease_holder(self, stream: str, shard: str) -> str:
        """The ephemeral node whose existence is the lease."""
        return f"{self.lease(stream, shard)}/holder"

    def workers(self, stream: str) -> str:
        return f"{self.stream(stream)}/@workers"

    def worker(self, stream: str, worker_id: str) -> str:
        return f"{self.workers(stream)}/{worker_id}"

    def batches(self, stream: str) -> str:
        """The stream's batch-end records (:mod:`~kinesis_spout.checkpoint.zk_batch_ends`)."""
        return f"{self.stream(stream)}/@batches"


def check_component(field: str, value: str) -> None:
    if not value or "/" in value or value.startswith("@") or value in (".", ".."):
        raise ConfigError(field, value, "a non-empty name without '/' not starting with '@'")


class SecretFilter(logging.Filter):
    """Masks the registered secrets in every record of the logger it is attached to."""

    def __init__(self) -> None:
        super().__init__()
        self._secrets: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, secret: str) -> None:
        with self._lock:
            self._secrets[secret] = self._secrets.get(secret, 0) + 1

    def discard(self, secret: str) -> None:
        with self._lock:
            n = self._secrets.get(secret, 0) - 1
            if n > 0:
                self._secrets[secret] = n
            else:
                self._secrets.pop(secret, None)

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            secrets = [s for s in self._secrets if s]
        if not secrets:
            return True
        msg = record.getMessage()
        masked = msg
        for secret in secrets:
            masked = masked.replace(secret, "***")
        if masked != msg:
            record.msg, record.args = masked, ()
        return True


secret_filter = SecretFilter()
"""Masks the digest passwords of open stores in kazoo's log lines."""
