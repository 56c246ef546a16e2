"""``open_store``: the checkpoint store a URL names (``memory://``, ``file://``, ``zk://``)."""

from __future__ import annotations

from kinesis_spout.checkpoint.base import CheckpointStore, MemoryCheckpointStore
from kinesis_spout.errors import ConfigError


def open_store(
    url: str,
    job_name: str,
    *,
    owner: str = "",
    zk_auth: str | None = None,
    zk_session_timeout: float = 10.0,
) -> CheckpointStore:
    """The store named by ``url``: ``memory://``, ``file://DIR``, ``zk://hosts/root``."""
    if url.startswith("memory://"):
        return MemoryCheckpointStore(job_name, owner=owner)
    if url.startswith("file://"):
        from kinesis_spout.checkpoint.file import FileCheckpointStore

        return FileCheckpointStore(url[len("file://") :], job_name, owner=owner)
    if url.startswith("zk://"):
        from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore

        return ZooKeeperCheckpointStore.from_url(
            url, job_name, owner=owner, auth=zk_auth, session_timeout=zk_session_timeout
        )
    raise ConfigError(
        "checkpoint_store", url, "a URL: memory://, file://DIR or zk://host:port[,host:port]/root"
    )
