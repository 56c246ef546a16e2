"""The stores a checkpoint-store URL names, of both families: the checkpoints
(:func:`open_store`) and the batch-end records (:func:`open_batch_ends`).

One parse of the URL (:func:`parse_store_url`) serves both, so a URL means the
same place to each and a bad one gets the same error: ``file://DIR`` (the directory is
the rest of the URL), ``zk://host:port[,host:port]/root`` (parsed by
:class:`~kinesis_spout.checkpoint.zk_layout.ZkUrl` when connecting) and
``dynamodb://TABLE`` (:class:`~kinesis_spout.checkpoint.dynamodb_layout.DynamoUrl`, in
the config's ``region`` with its ``profile`` and assumed role); ``memory://`` holds
checkpoints only (batch-end records are written by other processes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinesis_spout.checkpoint.base import CheckpointStore, MemoryCheckpointStore
from kinesis_spout.errors import ConfigError

if TYPE_CHECKING:
    from kinesis_spout.aws import AssumedRole
    from kinesis_spout.checkpoint.batch_ends import BatchEndStore
    from kinesis_spout.config import SpoutConfig

_FORMS = {
    "memory": "memory://",
    "file": "file://DIR",
    "zk": "zk://host:port[,host:port]/root",
    "dynamodb": "dynamodb://TABLE",
}
"""Each scheme as the error for a bad URL spells it."""


def parse_store_url(
    url: str, schemes: tuple[str, ...] = ("memory", "file", "zk", "dynamodb")
) -> tuple[str, str]:
    """The scheme of a checkpoint-store URL, one of ``schemes``, and the rest of it
    (``file://``: the directory); otherwise :class:`ConfigError` naming the URL and
    those schemes."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in schemes:
        return scheme, rest
    forms = [_FORMS[s] for s in schemes]
    allowed = f"{', '.join(forms[:-1])} or {forms[-1]}" if len(forms) > 1 else forms[0]
    raise ConfigError("checkpoint_store", url, f"a URL: {allowed}")


def open_store(
    url: str,
    job_name: str,
    *,
    owner: str = "",
    zk_auth: str | None = None,
    zk_session_timeout: float = 10.0,
    region: str | None = None,
    profile: str | None = None,
    role: AssumedRole | None = None,
) -> CheckpointStore:
    """The store named by ``url``: ``memory://``, ``file://DIR``, ``zk://hosts/root``,
    ``dynamodb://TABLE`` (in ``region`` with ``profile``, None: as boto3 resolves them;
    assuming ``role`` when given)."""
    scheme, rest = parse_store_url(url)
    if scheme == "memory":
        return MemoryCheckpointStore(job_name, owner=owner)
    if scheme == "file":
        from kinesis_spout.checkpoint.file import FileCheckpointStore

        return FileCheckpointStore(rest, job_name, owner=owner)
    if scheme == "dynamodb":
        from kinesis_spout.checkpoint.dynamodb import DynamoDbCheckpointStore

        return DynamoDbCheckpointStore.from_url(
            url, job_name, owner=owner, region=region, profile=profile, role=role
        )
    from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore

    return ZooKeeperCheckpointStore.from_url(
        url, job_name, owner=owner, auth=zk_auth, session_timeout=zk_session_timeout
    )


def open_batch_ends(
    url: str,
    job: str,
    stream: str,
    zk_auth: str | None = None,
    *,
    region: str | None = None,
    profile: str | None = None,
    role: AssumedRole | None = None,
) -> BatchEndStore:
    """The batch-end records of ``stream`` in the checkpoint store ``url`` (``file://DIR``,
    ``zk://hosts/root`` or ``dynamodb://TABLE`` in ``region`` with ``profile``, assuming
    ``role`` when given) for job ``job``."""
    scheme, rest = parse_store_url(url, ("file", "zk", "dynamodb"))
    if scheme == "file":
        from kinesis_spout.checkpoint.file_batch_ends import FileBatchEnds

        return FileBatchEnds(rest, job, stream)
    if scheme == "dynamodb":
        from kinesis_spout.checkpoint.dynamodb_batch_ends import DynamoDbBatchEnds

        return DynamoDbBatchEnds(url, job, stream, region=region, profile=profile, role=role)
    from kinesis_spout.checkpoint.zk_batch_ends import ZkBatchEnds

    return ZkBatchEnds(url, job, stream, zk_auth)


def open_config_store(cfg: SpoutConfig) -> CheckpointStore:
    """The store of a config: its URL and job, owned by its worker id, with its
    ZooKeeper auth and session timeout, its AWS region, profile and assumed role."""
    return open_store(
        cfg.checkpoint_store,
        cfg.job_name,
        owner=cfg.worker_id,
        zk_auth=cfg.zk_auth,
        zk_session_timeout=cfg.zk_session_timeout,
        region=cfg.region,
        profile=cfg.profile,
        role=cfg.assumed_role,
    )
