"""Reading the checkpoint store for ``status``: checkpoints, job lease, shard leases.

Read only: a ``file://`` directory that does not exist, or a ZooKeeper root
node that does not exist, is an error naming it (the job's stores create them
on their first write; ``status`` never does). An existing store with nothing
for the job yet is not an error: the report says there are no checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kinesis_spout.coordination.joblease import LOCK_FILE
from kinesis_spout.errors import ConfigError
from kinesis_spout.records import Checkpoint
from kinesis_spout.status.model import (
    JobLeaseStatus,
    ShardLease,
    StatusError,
    WorkerInfo,
)
from kinesis_spout.status.sources_leases import (
    file_job_lease,
    zk_job_lease,
    zk_shard_leases,
    zk_workers,
)


@dataclass(frozen=True, slots=True)
class StoreView:
    """What the checkpoint store holds for one job and stream."""

    checkpoints: dict[str, Checkpoint]
    job_lease: JobLeaseStatus
    leases: dict[str, ShardLease] | None
    """None for ``file://`` (no shard leases)."""
    workers: tuple[WorkerInfo, ...] | None


def read_store(
    url: str,
    job: str,
    stream: str,
    *,
    zk_auth: str | None = None,
    zk_session_timeout: float = 10.0,
    timeout: float = 10.0,
) -> StoreView:
    """The store's view of ``job`` on ``stream``; :class:`StatusError` naming the URL
    when the store does not exist or cannot be reached within ``timeout`` seconds."""
    if url.startswith("file://"):
        return _read_file(url, url[len("file://") :], job, stream)
    if url.startswith("zk://"):
        return _read_zk(url, job, stream, zk_auth, zk_session_timeout, timeout)
    raise ConfigError(
        "checkpoint_store",
        url,
        "file://DIR or zk://host:port[,host:port]/root (memory:// lives in one process only)",
    )


def _read_file(url: str, directory: str, job: str, stream: str) -> StoreView:
    from kinesis_spout.checkpoint.file import FileCheckpointStore

    root = Path(directory)
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise StatusError(
            f"checkpoint store {url}: directory {root.resolve()} {what} "
            "(check checkpoint_store; the job creates it on its first checkpoint)"
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
            raise StatusError(
                f"checkpoint store {url}: ZooKeeper node {root} does not exist "
                "(check checkpoint_store; the job creates it on its first checkpoint)"
            )
        return StoreView(
            checkpoints=store.load(stream),
            job_lease=zk_job_lease(store),
            leases=zk_shard_leases(store, stream),
            workers=zk_workers(store, stream),
        )
    finally:
        store.close()
