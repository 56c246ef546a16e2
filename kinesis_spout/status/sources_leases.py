"""Reading leases without taking them: the job lease (file lock, ZooKeeper node or
DynamoDB item), the ZooKeeper shard leases and the live workers.

Nothing here creates a file, a directory or a node, and nothing takes a lease:

* the file job lease (``DIR/<job>/.job.lock``) is opened read-only if it exists; a
  released lease leaves it empty. When it holds a holder's record, a *shared*
  ``flock`` probe (``LOCK_NB``, dropped at once) tells a live holder (whose
  exclusive lock refuses it) from a killed one. A driver starting in that same
  microsecond would see the lease as held and stop (exit 3), as it would for a
  running job; nothing else is affected;
* ZooKeeper nodes are only read (``get``, ``get_children``, ``exists``);
* the DynamoDB lease item is only read (``GetItem``): held while its expiry is ahead.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kinesis_spout.checkpoint.joblease import ZK_LEASE_NODE, holder_is_gone, holder_name
from kinesis_spout.status.model import (
    JobLeaseStatus,
    LeaseState,
    ShardLease,
    StatusError,
    WorkerInfo,
)

if TYPE_CHECKING:
    from kinesis_spout.checkpoint.dynamodb import DynamoDbCheckpointStore
    from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore


def _info(raw: bytes | str | None) -> dict[str, Any]:
    """The JSON object a holder recorded (empty for garbage)."""
    try:
        obj = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _time(value: Any) -> datetime | None:
    try:
        dt = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _holder(info: dict[str, Any]) -> str:
    """``host:pid``, with ``(what reads)`` when the holder recorded it."""
    if "host" in info and "pid" in info:
        return holder_name(info)
    return "an unknown process"


def _zk_time(ms: Any) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(int(ms) / 1000.0, UTC)


# -- the job lease --------------------------------------------------------------------


def file_job_lease(path: Path) -> JobLeaseStatus:
    """The ``flock`` job lease at ``path`` (see the module docstring)."""
    where = str(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return JobLeaseStatus(LeaseState.FREE, where)
    except OSError as exc:
        raise StatusError(f"cannot read the job lease {where}: {exc.strerror}") from None
    try:
        raw = os.read(fd, 1 << 16)
        if not raw.strip():
            return JobLeaseStatus(LeaseState.FREE, where)  # released (truncated)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _info(raw)
            return JobLeaseStatus(
                LeaseState.HELD, where, holder=_holder(info), since=_time(info.get("since"))
            )
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        return JobLeaseStatus(LeaseState.FREE, where)  # its holder was killed
    finally:
        os.close(fd)


def zk_job_lease(store: ZooKeeperCheckpointStore) -> JobLeaseStatus:
    """The ephemeral ``<root>/<job>/@job-lease`` node, read only."""
    from kazoo.exceptions import NoNodeError

    path = f"{store.paths.job_path}/{ZK_LEASE_NODE}"
    try:
        data, stat = store.wait(store.client.get_async(path), f"read {path}", (NoNodeError,))
    except NoNodeError:
        return JobLeaseStatus(LeaseState.FREE, path)
    info = _info(data)
    return JobLeaseStatus(
        LeaseState.HELD,
        path,
        holder=_holder(info),
        since=_time(info.get("since")) or _zk_time(stat.ctime),
        holder_gone=holder_is_gone(data),
    )


def dynamodb_job_lease(store: DynamoDbCheckpointStore) -> JobLeaseStatus:
    """The ``@job-lease`` item of the store's job, read only: held while its expiry is
    ahead (an expired one is free: the next reader takes it)."""
    import time

    from kinesis_spout.checkpoint.dynamodb_layout import item_where
    from kinesis_spout.checkpoint.dynamodb_lease import LeaseItem

    where = item_where(store.table.name, store.keys.lease())
    item = LeaseItem.read(store.table, store.keys)
    if item is None or item.expires_at <= time.time():
        return JobLeaseStatus(LeaseState.FREE, where)
    info = _info(item.holder)
    return JobLeaseStatus(
        LeaseState.HELD,
        where,
        holder=_holder(info),
        since=_time(info.get("since")),
        holder_gone=holder_is_gone(item.holder),
    )


# -- shard leases and workers (ZooKeeper) ----------------------------------------------


def _children(store: ZooKeeperCheckpointStore, path: str) -> list[str]:
    from kazoo.exceptions import NoNodeError

    try:
        children = store.wait(store.client.get_children_async(path), f"list {path}", (NoNodeError,))
    except NoNodeError:
        return []
    return sorted(children)


def _get(store: ZooKeeperCheckpointStore, result: Any, path: str) -> tuple[bytes, Any] | None:
    from kazoo.exceptions import NoNodeError

    try:
        data, stat = store.wait(result, f"read {path}", (NoNodeError,))
    except NoNodeError:
        return None  # gone between the listing and the read
    return data, stat


def zk_shard_leases(store: ZooKeeperCheckpointStore, stream: str) -> dict[str, ShardLease]:
    """``{shard: lease}`` for every shard lease held right now."""
    paths = store.paths
    client = store.client
    shards = _children(store, paths.leases(stream))
    pending = [
        (
            shard,
            client.get_async(paths.lease_holder(stream, shard)),
            client.exists_async(paths.lease(stream, shard)),
        )
        for shard in shards
    ]
    out: dict[str, ShardLease] = {}
    for shard, holder_result, epoch_result in pending:
        got = _get(store, holder_result, paths.lease_holder(stream, shard))
        epoch_stat = store.wait(epoch_result, f"stat {paths.lease(stream, shard)}")
        if got is None:
            continue
        info = _info(got[0])
        out[shard] = ShardLease(
            owner=str(info.get("owner", "?")),
            host=info.get("host"),
            pid=_int(info.get("pid")),
            acquired_at=_zk_time(got[1].ctime),
            epoch=int(epoch_stat.version) if epoch_stat is not None else None,
        )
    return out


def zk_workers(store: ZooKeeperCheckpointStore, stream: str) -> tuple[WorkerInfo, ...]:
    """The live workers of ``stream`` (their ephemeral member nodes)."""
    base = store.paths.workers(stream)
    names = _children(store, base)
    pending = [(w, store.client.get_async(f"{base}/{w}")) for w in names]
    out = []
    for worker_id, result in pending:
        got = _get(store, result, f"{base}/{worker_id}")
        if got is None:
            continue
        info = _info(got[0])
        out.append(
            WorkerInfo(
                worker_id=worker_id,
                host=info.get("host"),
                pid=_int(info.get("pid")),
                since=_time(info.get("since")) or _zk_time(got[1].ctime),
            )
        )
    return tuple(out)
