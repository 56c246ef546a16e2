"""Reading the checkpoint store for ``status``: checkpoints, job lease, shard leases.

Read only: ``status`` never creates a directory, a node or a table. A ``file://``
directory, a ZooKeeper root node or a DynamoDB table that does not exist yet is a store
with no checkpoints (the job's stores create them on their first write): every shard is
listed with none, and a note names the missing directory or node (a typo in
``checkpoint_store`` shows there). A ``file://`` path that is not a directory is
an error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kinesis_spout.checkpoint.joblease import LOCK_FILE, ZK_LEASE_NODE
from kinesis_spout.errors import ConfigError
from kinesis_spout.records import Checkpoint
from kinesis_spout.status.model import (
    JobLeaseStatus,
    LeaseState,
    ShardLease,
    StatusError,
    WorkerInfo,
)
from kinesis_spout.status.sources_leases import (
    dynamodb_job_lease,
    file_job_lease,
    zk_job_lease,
    zk_shard_leases,
    zk_workers,
)

if TYPE_CHECKING:
    from kinesis_spout.aws import AssumedRole


@dataclass(frozen=True, slots=True)
class StoreView:
    """What the checkpoint store holds for one job and stream."""

    checkpoints: dict[str, Checkpoint]
    job_lease: JobLeaseStatus
    leases: dict[str, ShardLease] | None
    """None for ``file://`` and ``dynamodb://`` (no shard leases)."""
    workers: tuple[WorkerInfo, ...] | None
    missing: str | None = None
    """Set when the store does not exist yet: what is missing, for a note."""


def read_store(
    url: str,
    job: str,
    stream: str,
    *,
    zk_auth: str | None = None,
    zk_session_timeout: float = 10.0,
    timeout: float = 10.0,
    region: str | None = None,
    profile: str | None = None,
    role: AssumedRole | None = None,
) -> StoreView:
    """The store's view of ``job`` on ``stream``; :class:`StatusError` naming the URL
    when the store does not exist or cannot be reached within ``timeout`` seconds
    (``region``, ``profile``, ``role``: a ``dynamodb://`` table's)."""
    if url.startswith("file://"):
        return _read_file(url, url[len("file://") :], job, stream)
    if url.startswith("zk://"):
        return _read_zk(url, job, stream, zk_auth, zk_session_timeout, timeout)
    if url.startswith("dynamodb://"):
        return _read_dynamodb(url, job, stream, region, profile, role)
    raise ConfigError(
        "checkpoint_store",
        url,
        "file://DIR, zk://host:port[,host:port]/root or dynamodb://TABLE (memory:// lives "
        "in one process only)",
    )


def _read_file(url: str, directory: str, job: str, stream: str) -> StoreView:
    from kinesis_spout.checkpoint.file import FileCheckpointStore

    root = Path(directory)
    if not root.exists():
        lease = JobLeaseStatus(LeaseState.FREE, str(root / job / LOCK_FILE))
        missing = f"checkpoint store {url}: directory {root.resolve()} does not exist yet"
        return StoreView({}, lease, None, None, missing)
    if not root.is_dir():
        raise StatusError(
            f"checkpoint store {url}: {root.resolve()} is not a directory (check checkpoint_store)"
        )
    store = FileCheckpointStore(root, job)  # reads only: nothing is created by load()
    try:
        checkpoints = store.load(stream)
    finally:
        store.close()
    return StoreView(checkpoints, file_job_lease(root / job / LOCK_FILE), None, None)


def _read_zk(
    url: str, job: str, stream: str, auth: str | None, session_timeout: float, timeout: float
) -> StoreView:
    from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore

    # An unreachable ensemble: CheckpointStoreUnavailableError naming the URL and timeout.
    store = ZooKeeperCheckpointStore.from_url(
        url, job, auth=auth, session_timeout=session_timeout, connect_timeout=timeout
    )
    try:
        root = store.paths.root
        if store.wait(store.client.exists_async(root), f"stat {root}") is None:
            lease = JobLeaseStatus(LeaseState.FREE, f"{store.paths.job_path}/{ZK_LEASE_NODE}")
            missing = f"checkpoint store {url}: ZooKeeper node {root} does not exist yet"
            return StoreView({}, lease, {}, (), missing)
        return StoreView(
            checkpoints=store.load(stream),
            job_lease=zk_job_lease(store),
            leases=zk_shard_leases(store, stream),
            workers=zk_workers(store, stream),
        )
    finally:
        store.close()


def held_job_lease(
    url: str,
    job: str,
    *,
    zk_auth: str | None = None,
    timeout: float = 5.0,
    region: str | None = None,
    profile: str | None = None,
    role: AssumedRole | None = None,
) -> JobLeaseStatus | None:
    """The job lease of ``job`` when a live reader holds it, else None; read only (what
    ``kinesis-spout run`` asks when the metrics port is taken: most often by a copy of
    the same job, which the lease names; ``region``, ``profile``, ``role``: a
    ``dynamodb://`` table's)."""
    if url.startswith("file://"):
        lease = file_job_lease(Path(url[len("file://") :]) / job / LOCK_FILE)
    elif url.startswith("zk://"):
        from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore

        store = ZooKeeperCheckpointStore.from_url(
            url, job, auth=zk_auth, session_timeout=timeout, connect_timeout=timeout
        )
        try:
            lease = zk_job_lease(store)
        finally:
            store.close()
    elif url.startswith("dynamodb://"):
        from kinesis_spout.checkpoint.dynamodb import DynamoDbCheckpointStore
        from kinesis_spout.checkpoint.dynamodb_table import TableMissingError

        try:
            dyn = DynamoDbCheckpointStore.from_url(
                url, job, region=region, profile=profile, role=role, create_table=False
            )
        except TableMissingError:
            return None
        try:
            lease = dynamodb_job_lease(dyn)
        finally:
            dyn.close()
    else:
        return None
    return lease if lease.state is LeaseState.HELD and not lease.holder_gone else None


def _read_dynamodb(
    url: str,
    job: str,
    stream: str,
    region: str | None,
    profile: str | None,
    role: AssumedRole | None,
) -> StoreView:
    from kinesis_spout.checkpoint.dynamodb import DynamoDbCheckpointStore
    from kinesis_spout.checkpoint.dynamodb_table import TableMissingError

    try:
        store = DynamoDbCheckpointStore.from_url(
            url, job, region=region, profile=profile, role=role, create_table=False
        )
    except TableMissingError:
        lease = JobLeaseStatus(LeaseState.FREE, url)
        missing = f"checkpoint store {url}: DynamoDB table does not exist yet"
        return StoreView({}, lease, None, None, missing)
    try:
        return StoreView(store.load(stream), dynamodb_job_lease(store), None, None)
    finally:
        store.close()
