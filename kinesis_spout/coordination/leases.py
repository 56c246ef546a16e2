"""Shard leases and worker membership in ZooKeeper (the I/O half of coordination).

A lease is the ephemeral ``@leases/<shardId>/holder`` node: it lives while its creator's
session does (a crash is noticed after the session timeout). Acquiring is one transaction
that creates ``holder`` and bumps the persistent ``@leases/<shardId>`` node's version, the
lease *epoch*, which the checkpoint store then fences every write of the shard on. The
node layout: docs/checkpoints.md. :class:`LeaseState` is the per-shard state a coordinator
keeps; this module only does the ZooKeeper operations and translates kazoo's errors.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore
from kinesis_spout.errors import CheckpointError, CheckpointStoreUnavailableError

log = logging.getLogger(__name__)

Watch = Callable[[Any], None]


class LeaseState(enum.Enum):
    """One shard's lease as this worker sees it.

    Transitions (the coordinator drives them)::

        (none)     --shard assigned to this worker-->           ACQUIRING
        ACQUIRING  --holder node created (epoch bumped)-->      HELD        spout starts the shard
        ACQUIRING  --holder exists (other worker)-->            ACQUIRING   retried on its deletion
        ACQUIRING  --no longer assigned-->                      (none)
        HELD       --no longer assigned, or shutdown-->         RELEASING   spout stops emitting
        RELEASING  --in flight drained (or drain timeout):
                     spout flushes and drops the shard,
                     holder node deleted-->                      (none)
        HELD, RELEASING --connection SUSPENDED-->               SUSPENDED   spout stops emitting
        SUSPENDED  --CONNECTED, same session, holder ours-->    HELD        spout resumes
        SUSPENDED  --session LOST, or holder not ours-->        (none)      spout drops the shard;
                                                                            re-acquired if assigned
    """

    ACQUIRING = "acquiring"
    HELD = "held"
    RELEASING = "releasing"
    SUSPENDED = "suspended"


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease this worker holds."""

    stream_name: str
    shard_id: str
    owner: str
    """The worker id written in the holder node."""
    epoch: int
    """Version of the epoch node after this acquisition: the checkpoint fence."""
    session_id: int
    """The ZooKeeper session that owns the ephemeral holder node."""


def _node_data(worker_id: str) -> bytes:
    return json.dumps(
        {
            "owner": worker_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": datetime.now(UTC).isoformat(),
        },
        sort_keys=True,
    ).encode()


def _owner_of(data: bytes) -> str:
    try:
        obj = json.loads(data)
    except ValueError:
        return "?"
    return str(obj.get("owner", "?")) if isinstance(obj, dict) else "?"


class ZooKeeperLeases:
    """Lease and membership operations of one worker on one stream.

    Uses the store's kazoo client, so leases and fenced checkpoint writes share
    one session. Every method may raise
    :class:`~kinesis_spout.errors.CheckpointStoreUnavailableError` (retriable)
    when ZooKeeper cannot be reached, and never blocks longer than the store's
    ``op_timeout``.
    """

    def __init__(self, store: ZooKeeperCheckpointStore, stream_name: str, worker_id: str) -> None:
        self.store = store
        self.stream_name = stream_name
        self.worker_id = worker_id
        self.paths = store.paths
        self._client = store.client

    def _session(self, what: str) -> int:
        sid = self.store.session_id
        if sid is None or not self.store.connected:
            raise CheckpointStoreUnavailableError(f"ZooKeeper not connected: {what} not attempted")
        return sid

    # -- membership ------------------------------------------------------------------
    def register(self) -> bool:
        """Create this worker's ephemeral member node. False if a node of that
        name belongs to another live session (a previous run with the same id
        whose session has not expired yet): try again later."""
        sid = self._session("register worker")
        path = self.paths.worker(self.stream_name, self.worker_id)
        self.store.ensure_path(self.paths.workers(self.stream_name))
        try:
            self.store.wait(
                self._client.create_async(
                    path, _node_data(self.worker_id), acl=self._acl(), ephemeral=True
                ),
                f"create {path}",
                (NodeExistsError,),
            )
            log.info("worker %s joined %s", self.worker_id, self.stream_name)
            return True
        except NodeExistsError:
            stat = self._exists(path)
            return stat is not None and stat.ephemeralOwner == sid

    def unregister(self) -> None:
        """Delete this worker's member node if it is ours."""
        self._delete_if_ours(self.paths.worker(self.stream_name, self.worker_id))

    def workers(self, watch: Watch | None = None) -> list[str]:
        """Live workers, sorted; ``watch`` fires once when the set changes."""
        path = self.paths.workers(self.stream_name)
        self.store.ensure_path(path)
        children = self.store.wait(
            self._client.get_children_async(path, watch=watch), "list workers"
        )
        return sorted(children)

    # -- leases ------------------------------------------------------------------------
    def acquire(self, shard_id: str, watch: Watch | None = None) -> Lease | None:
        """Take the lease of ``shard_id`` if it is free (or already ours).

        On success the store is told the epoch, so checkpoint writes of the
        shard are fenced on it. None when another worker holds it; ``watch``
        then fires once when the holder node is deleted.
        """
        sid = self._session(f"acquire lease {shard_id}")
        epoch_path = self.paths.lease(self.stream_name, shard_id)
        holder = self.paths.lease_holder(self.stream_name, shard_id)
        self.store.ensure_path(epoch_path)
        data = _node_data(self.worker_id)
        tx = self._client.transaction()
        tx.create(holder, data, acl=self._acl(), ephemeral=True)
        tx.set_data(epoch_path, data, -1)
        results = self.store.wait(tx.commit_async(), f"acquire lease {holder}")
        if not any(isinstance(r, Exception) for r in results):
            epoch = int(results[1].version)
            log.info(
                "worker %s acquired %s/%s (epoch %d)",
                self.worker_id,
                self.stream_name,
                shard_id,
                epoch,
            )
            return self._held(shard_id, epoch, sid)
        if not isinstance(results[0], NodeExistsError):
            raise CheckpointError(f"acquiring lease {holder} failed: {results[0]!r}")
        stat = self._exists(holder, watch)
        if stat is None:
            return None  # released just now; the caller retries soon
        if stat.ephemeralOwner == sid:
            # Ours already (a reply lost to a connection drop): no one else can
            # have bumped the epoch since, so its current version is our epoch.
            _, epoch_stat = self.store.wait(self._client.get_async(epoch_path), "read epoch")
            return self._held(shard_id, int(epoch_stat.version), sid)
        return None

    def still_held(self, lease: Lease) -> bool:
        """True if the holder node exists and belongs to the current session."""
        sid = self._session(f"check lease {lease.shard_id}")
        stat = self._exists(self.paths.lease_holder(self.stream_name, lease.shard_id))
        return stat is not None and stat.ephemeralOwner == sid == lease.session_id

    def release(self, lease: Lease) -> None:
        """Delete the holder node if it is still ours, and drop the fence."""
        try:
            if self._delete_if_ours(self.paths.lease_holder(self.stream_name, lease.shard_id)):
                log.info(
                    "worker %s released %s/%s", self.worker_id, self.stream_name, lease.shard_id
                )
        finally:
            self.store.set_lease(self.stream_name, lease.shard_id, None)

    def forget(self, shard_id: str) -> None:
        """Drop the fence of a lease known to be gone (session lost)."""
        self.store.set_lease(self.stream_name, shard_id, None)

    def holders(self) -> dict[str, str]:
        """``{shard_id: worker id}`` of every lease held right now (for tools and tests)."""
        base = self.paths.leases(self.stream_name)
        try:
            shards = self.store.wait(
                self._client.get_children_async(base), "list leases", (NoNodeError,)
            )
        except NoNodeError:
            return {}
        out: dict[str, str] = {}
        for shard in sorted(shards):
            path = self.paths.lease_holder(self.stream_name, shard)
            try:
                data, _ = self.store.wait(
                    self._client.get_async(path), f"read {path}", (NoNodeError,)
                )
            except NoNodeError:
                continue
            out[shard] = _owner_of(data)
        return out

    # -- internals ------------------------------------------------------------------------
    def _held(self, shard_id: str, epoch: int, sid: int) -> Lease:
        self.store.set_lease(self.stream_name, shard_id, epoch)
        return Lease(self.stream_name, shard_id, self.worker_id, epoch, sid)

    def _acl(self) -> Any:
        return self.store.acl

    def _exists(self, path: str, watch: Watch | None = None) -> Any:
        return self.store.wait(self._client.exists_async(path, watch=watch), f"stat {path}")

    def _delete_if_ours(self, path: str) -> bool:
        sid = self._session(f"delete {path}")
        stat = self._exists(path)
        if stat is None or stat.ephemeralOwner != sid:
            return False
        try:
            self.store.wait(
                self._client.delete_async(path, version=stat.version),
                f"delete {path}",
                (NoNodeError,),
            )
        except NoNodeError:
            return False
        return True
