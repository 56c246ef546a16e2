"""The job lease: one active reader per job name and checkpoint store.

Two readers with the same job name would both read every shard and race on the same
checkpoints, so each reader (the Spark job's driver, every
:class:`~kinesis_spout.spout.KinesisSpout` not coordinated by shard leases) holds a lease
for its job name before it reads anything: a ``flock`` for ``file://``, an ephemeral node
for ``zk://``, an item a heartbeat renews for ``dynamodb://``
(:mod:`~kinesis_spout.checkpoint.dynamodb_lease`), none for ``memory://``. A second
reader fails with :class:`JobLeaseHeldError` naming the holder, or waits for it. A lease
is ``new``, ``held``, ``released`` or ``lost`` (the job is told and stops). The table per
store: docs/checkpoints.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from kinesis_spout.checkpoint.lease_holder import (
    WAIT_FLAG_HINT,
    JobLease,
    JobLeaseHeldError,
    LeaseWaiter,
    describe_holder,
    held_error,
    holder_info,
    holder_is_gone,
    holder_name,
)
from kinesis_spout.errors import ConfigError

__all__ = [
    "LOCK_FILE",
    "WAIT_FLAG_HINT",
    "ZK_LEASE_NODE",
    "FileJobLease",
    "JobLease",
    "JobLeaseHeldError",
    "LeaseWaiter",
    "ZooKeeperJobLease",
    "describe_holder",
    "held_error",
    "holder_info",
    "holder_is_gone",
    "holder_name",
    "open_config_job_lease",
    "open_job_lease",
]

if TYPE_CHECKING:
    from kinesis_spout.aws import AssumedRole
    from kinesis_spout.config import SpoutConfig

log = logging.getLogger(__name__)

#: The lease node's name under the job's node ('@' is not allowed in stream names).
ZK_LEASE_NODE = "@job-lease"
LOCK_FILE = ".job.lock"


class FileJobLease:
    """An ``flock`` on ``<directory>/<job>/.job.lock``; see the module docstring."""

    def __init__(
        self, directory: str | os.PathLike[str], job_name: str, reader: str | None = None
    ) -> None:
        self.job_name = job_name
        self.reader = reader
        self.path = Path(directory) / job_name / LOCK_FILE
        self._fh: IO[str] | None = None

    def _try_once(self) -> str | None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = describe_holder(fh.read())
            fh.close()
            return holder
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps(holder_info(self.job_name, self.reader)))
        fh.flush()
        self._fh = fh
        return None

    def acquire(self, wait: bool = False, timeout: float | None = None) -> None:
        LeaseWaiter(self._try_once).run(self.job_name, str(self.path), wait, timeout)

    on_lost: Callable[[], None] | None = None  # never called: the lock lasts as the process

    @property
    def lost(self) -> bool:
        return False

    def release(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.truncate(0)
            fh.close()  # closing the descriptor drops the lock


class ZooKeeperJobLease:
    """An ephemeral node ``<root>/<job>/@job-lease``; see the module docstring."""

    def __init__(
        self, url: str, job_name: str, *, auth: str | None = None, reader: str | None = None
    ) -> None:
        from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore

        self.job_name = job_name
        self.reader = reader
        # The store's own connection handling (chroot, ACLs, retries, secrets masking).
        self._store = ZooKeeperCheckpointStore.from_url(url, job_name, auth=auth)
        self.path = f"{self._store.paths.job_path}/{ZK_LEASE_NODE}"
        self._held = False
        self._lost = False
        self.on_lost: Callable[[], None] | None = None
        """Called (on kazoo's thread) when a held lease is lost."""
        self._store.client.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        if state == "LOST" and self._held and not self._lost:
            self._lost = True
            log.error("job %r: ZooKeeper session lost, and the job lease with it", self.job_name)
            if self.on_lost is not None:
                self.on_lost()

    def _try_once(self) -> str | None:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        client = self._store.client
        self._store.ensure_path(self._store.paths.job_path)
        data = json.dumps(holder_info(self.job_name, self.reader)).encode()
        for _ in range(2):
            try:
                client.create(self.path, data, acl=self._store.acl, ephemeral=True)
            except NodeExistsError:
                try:
                    raw, stat = client.get(self.path)
                except NoNodeError:
                    continue  # the holder just left: try again
                if not holder_is_gone(raw):
                    return describe_holder(raw)
                log.warning(
                    "job %r: the lease holder %s is dead (its session not yet expired): "
                    "taking the lease over",
                    self.job_name,
                    describe_holder(raw),
                )
                with contextlib.suppress(NoNodeError, BadVersionError):
                    client.delete(self.path, version=stat.version)
                continue
            self._held = True
            return None
        return "a process that just left"

    def acquire(self, wait: bool = False, timeout: float | None = None) -> None:
        LeaseWaiter(self._try_once).run(self.job_name, self.path, wait, timeout)

    @property
    def lost(self) -> bool:
        return self._lost

    def release(self) -> None:
        from kazoo.exceptions import KazooException

        if self._held and not self._lost:
            with contextlib.suppress(KazooException):
                self._store.client.delete(self.path)
        self._held = False
        self._store.client.remove_listener(self._on_state)
        self._store.close()


class _NoLease:
    """``memory://`` stores: a single process, nothing to fence."""

    lost = False
    on_lost: Callable[[], None] | None = None

    def acquire(self, wait: bool = False, timeout: float | None = None) -> None:
        return None

    def release(self) -> None:
        return None


def open_job_lease(
    store_url: str,
    job_name: str,
    *,
    zk_auth: str | None = None,
    reader: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    role: AssumedRole | None = None,
) -> JobLease:
    """The job lease for a checkpoint store URL (not yet acquired); ``reader`` says what
    reads, for the holder's record (``status`` and the error of a second reader show it);
    ``region``, ``profile`` and ``role``: a ``dynamodb://`` table's (None: as boto3
    resolves them; no role assumed)."""
    if store_url.startswith("file://"):
        return FileJobLease(store_url[len("file://") :], job_name, reader)
    if store_url.startswith("zk://"):
        return ZooKeeperJobLease(store_url, job_name, auth=zk_auth, reader=reader)
    if store_url.startswith("dynamodb://"):
        from kinesis_spout.checkpoint.dynamodb_lease import DynamoDbJobLease

        return DynamoDbJobLease.open(
            store_url, job_name, region=region, profile=profile, role=role, reader=reader
        )
    if store_url.startswith("memory://"):
        return _NoLease()
    raise ConfigError(
        "checkpoint_store",
        store_url,
        "a URL: memory://, file://DIR, zk://host:port/root or dynamodb://TABLE",
    )


def open_config_job_lease(cfg: SpoutConfig, reader: str) -> JobLease:
    """The job lease of a config's job (not yet acquired): its store with its ZooKeeper
    auth, AWS region, profile and assumed role; ``reader`` as :func:`open_job_lease`'s."""
    return open_job_lease(
        cfg.checkpoint_store,
        cfg.job_name,
        zk_auth=cfg.zk_auth,
        reader=reader,
        region=cfg.region,
        profile=cfg.profile,
        role=cfg.assumed_role,
    )
