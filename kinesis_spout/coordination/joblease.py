"""The job lease: one active reader per job name and checkpoint store.

Two readers with the same job name would both read every shard and race on
the same checkpoints. So each reader holds a lease for its job name before it
reads anything: the Spark job's driver (``kinesis-spout run``), and every
:class:`~kinesis_spout.spout.KinesisSpout` (your own loop, the multilang
process), unless it shares the stream through the coordination worker's shard
leases instead:

* ``file://DIR`` stores: an OS lock (``flock``) on ``DIR/<job>/.job.lock``,
  released by the kernel when the process dies, even by ``kill -9``;
* ``zk://`` stores: an ephemeral node ``<root>/<job>/@job-lease``, gone when the
  driver's ZooKeeper session ends;
* ``dynamodb://`` stores: an item with an owner, a counter and an expiry that a
  heartbeat renews (:mod:`~kinesis_spout.checkpoint.dynamodb_lease`), free once it
  expires;
* ``memory://`` stores live in one process: nothing to share, no lease.

Each records who holds it (host, pid, start time, and what reads: ``kinesis-spout
run``, ``KinesisSpout (loop.py)``), so a second reader fails
with :class:`JobLeaseHeldError` naming the job and the holder, or, asked to
wait, logs that it waits and takes the lease when the holder goes.

Lease states (:class:`JobLease`): ``new -> held`` (``acquire``), ``held ->
released`` (``release``), ``held -> lost`` (ZooKeeper session expired, DynamoDB lease
not renewed in time or taken over: another driver may now start; the job is told
through ``lost`` and stops).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from kinesis_spout.errors import ConfigError, KinesisSpoutError

if TYPE_CHECKING:
    from kinesis_spout.aws import AssumedRole

log = logging.getLogger(__name__)

#: The lease node's name under the job's node ('@' is not allowed in stream names).
ZK_LEASE_NODE = "@job-lease"
LOCK_FILE = ".job.lock"


class JobLeaseHeldError(KinesisSpoutError):
    """Another driver of the same job holds the job lease."""


class JobLease(Protocol):
    """What the job needs of a lease, whatever the store."""

    def acquire(self, wait: bool = False, timeout: float | None = None) -> None:
        """Take the lease, or raise :class:`JobLeaseHeldError` (after ``timeout``
        seconds when waiting; None = wait until it is free)."""
        ...

    @property
    def lost(self) -> bool:
        """The lease was held and is gone (another driver may run now)."""
        ...

    on_lost: Callable[[], None] | None
    """Called when a held lease is lost (ZooKeeper, DynamoDB), e.g. to stop the job."""

    def release(self) -> None: ...


def holder_info(job_name: str, reader: str | None = None) -> dict[str, Any]:
    """Who holds a lease: written into the lock file or node (``reader``: what reads)."""
    from kinesis_spout.processinfo import process_start_time

    info: dict[str, Any] = {
        "job": job_name,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": process_start_time(os.getpid()),
        "since": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if reader:
        info["reader"] = reader
    return info


def holder_name(info: dict[str, Any]) -> str:
    """``host:pid`` of a holder's record, with ``(reader)`` when it says what reads."""
    name = f"{info['host']}:{info['pid']}"
    return f"{name} ({info['reader']})" if info.get("reader") else name


def holder_is_gone(raw: bytes | str | None) -> bool:
    """True if the holder recorded in ``raw`` ran on this host and has died.

    A ZooKeeper ephemeral node outlives a ``kill -9``-ed holder until its session
    expires (10 s or more); on the same host a dead pid (with the same start
    time, so a reused pid does not count) settles it at once. Anything unclear
    counts as alive.
    """
    from kinesis_spout.processinfo import process_start_time

    try:
        info = json.loads(raw or b"{}")
        host, pid, started = info["host"], int(info["pid"]), info.get("started")
    except (ValueError, KeyError, TypeError):
        return False
    if host != socket.gethostname():
        return False
    now = process_start_time(pid)
    return now is None or (started not in (None, "?") and now not in ("?", started))


def describe_holder(raw: bytes | str | None) -> str:
    """``host:pid (reader) since TIME`` from stored holder info (tolerates garbage)."""
    try:
        info = json.loads(raw or b"{}")
        return f"{holder_name(info)} since {info['since']}"
    except (ValueError, KeyError, TypeError):
        return "an unknown process"


WAIT_FLAG_HINT = "pass --wait-for-lease"
"""How the error of a second reader started from the command line says to wait."""


def held_error(job_name: str, holder: str, where: str) -> JobLeaseHeldError:
    """The error of a second reader of ``job_name``: who holds its lease, and where."""
    return JobLeaseHeldError(
        f"job {job_name!r} is already running (lease {where} held by {holder}); "
        f"stop it, or {WAIT_FLAG_HINT} to take over when it ends"
    )


class LeaseWaiter:
    """Polls ``try_once`` (None: taken; else who holds it) until it succeeds or ``timeout``
    passes, logging progress; every store's lease takes itself with it."""

    def __init__(
        self,
        try_once: Callable[[], str | None],
        sleep: Callable[[float], None] = time.sleep,
        interval: float = 0.5,
    ) -> None:
        self.try_once = try_once
        self.sleep = sleep
        self.interval = interval

    def run(self, job_name: str, where: str, wait: bool, timeout: float | None) -> None:
        holder = self.try_once()
        if holder is None:
            return
        if not wait:
            raise held_error(job_name, holder, where)
        start = time.monotonic()
        log.warning("job %r: waiting for the lease %s held by %s", job_name, where, holder)
        next_note = start + 30.0
        while holder is not None:
            now = time.monotonic()
            if timeout is not None and now - start >= timeout:
                raise held_error(job_name, holder, where)
            if now >= next_note:
                log.warning("job %r: still waiting (%.0fs) for %s", job_name, now - start, holder)
                next_note = now + 30.0
            self.sleep(self.interval)
            holder = self.try_once()
        log.info("job %r: lease %s taken after %.1fs", job_name, where, time.monotonic() - start)


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
