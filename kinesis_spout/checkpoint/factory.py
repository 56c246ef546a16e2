"""``open_store``: the checkpoint store a URL names (``memory://``, ``file://``, ``zk://``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinesis_spout.checkpoint.base import CheckpointStore, MemoryCheckpointStore
from kinesis_spout.errors import ConfigError

if TYPE_CHECKING:
    from kinesis_spout.config import SpoutConfig


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


def open_config_store(cfg: SpoutConfig) -> CheckpointStore:
    """The store of a config: its URL and job, owned by its worker id, with its
    ZooKeeper auth and session timeout."""
    return open_store(
        cfg.checkpoint_store,
        cfg.job_name,
        owner=cfg.worker_id,
        zk_auth=cfg.zk_auth,
        zk_session_timeout=cfg.zk_session_timeout,
    )
