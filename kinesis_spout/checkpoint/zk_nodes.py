"""A ZooKeeper connection as the checkpoint store and its coordination use it: the
nodes under the job's paths, each call bounded in time, nothing sent while the
connection is not CONNECTED.

:class:`ZkNodes` holds the kazoo client, the ACL of the nodes it creates, the paths
(:class:`~kinesis_spout.checkpoint.zk_layout.ZkPaths`) and the connection state kazoo
reports. The checkpoint protocol on top of it (compare-and-set, fencing, resets) is
:mod:`kinesis_spout.checkpoint.zookeeper` and :mod:`kinesis_spout.checkpoint.zk_reset`.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.security import ACL

from kinesis_spout.checkpoint.codec import decode_checkpoint, encode_checkpoint
from kinesis_spout.checkpoint.zk_connect import wait_for
from kinesis_spout.checkpoint.zk_layout import ZkPaths
from kinesis_spout.errors import CheckpointError, CheckpointStoreUnavailableError
from kinesis_spout.records import Checkpoint

log = logging.getLogger(__name__)


class ZkNodes:
    """The nodes of one job in ZooKeeper (see the module docstring).

    ``name``: how errors name the store (its ``repr``); ``description``: the ensemble
    and root, for log lines and errors."""

    def __init__(
        self,
        client: KazooClient,
        paths: ZkPaths,
        *,
        acl: list[ACL] | None,
        op_timeout: float,
        description: str,
        name: str,
    ) -> None:
        self.client = client
        self.paths = paths
        self.acl = acl
        self.op_timeout = op_timeout
        self.description = description
        self.name = name
        self.closed = False
        self.state: str = KazooState.CONNECTED if client.connected else KazooState.SUSPENDED
        self._created: set[str] = set()
        client.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's thread: only record the state, never block.
        self.state = state
        if state != KazooState.CONNECTED:
            log.warning("ZooKeeper connection %s (%s)", state, self.description)
        else:
            log.info("ZooKeeper connection CONNECTED (%s)", self.description)

    @property
    def connected(self) -> bool:
        """True while kazoo reports CONNECTED (leases and writes can be trusted)."""
        return self.state == KazooState.CONNECTED and not self.closed

    def close(self) -> None:
        """No call is sent any more; the client is left as it is (its owner stops it)."""
        self.closed = True
        self.client.remove_listener(self._on_state)

    def check_usable(self, what: str) -> None:
        """Raise unless a call may be sent now: closed, or not CONNECTED (retriable)."""
        if self.closed:
            raise CheckpointError(f"{self.name} is closed ({what})")
        if self.state != KazooState.CONNECTED:
            raise CheckpointStoreUnavailableError(
                f"ZooKeeper is {self.state} ({self.description}): {what} not attempted"
            )

    def wait(self, async_result: Any, what: str, expect: tuple[type[Exception], ...] = ()) -> Any:
        """Wait for a kazoo async result, at most ``op_timeout``; translate errors.

        Errors in ``expect`` (e.g. ``NoNodeError``) are raised as they are, for
        the caller to interpret. Connection problems become
        :class:`CheckpointStoreUnavailableError` (retriable); anything else from
        kazoo a non-retriable :class:`CheckpointError`.
        """
        return wait_for(async_result, what, expect, self.op_timeout, self.description, self.name)

    def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents if missing (cached).

        Nodes above ``/<root>/<job>`` get the open ACL, the rest the job's ACL.
        """
        if path in self._created:
            return
        job_path = self.paths.job_path
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            p = "/" + "/".join(parts[:i])
            if p in self._created:
                continue
            acl = self.acl if len(p) >= len(job_path) else None
            with contextlib.suppress(NodeExistsError):
                self.wait(
                    self.client.create_async(p, b"", acl=acl), f"create {p}", (NodeExistsError,)
                )
            self._created.add(p)

    def decode(self, data: bytes, path: str, stream: str, shard: str) -> Checkpoint:
        """A checkpoint node's data (a foreign or corrupt node raises, naming ``path``)."""
        job = self.paths.job
        return decode_checkpoint(data, where=path, stream=stream, shard=shard, job=job)

    def read_checkpoint(self, stream: str, shard: str) -> tuple[Checkpoint | None, int | None]:
        """The stored checkpoint of a shard and its node version (None, None: none)."""
        path = self.paths.checkpoint(stream, shard)
        try:
            data, stat = self.wait(self.client.get_async(path), f"read {path}", (NoNodeError,))
        except NoNodeError:
            return None, None
        return self.decode(data, path, stream, shard), int(stat.version)

    def checkpoint_tx(self, new: Checkpoint, version: int | None, epoch: int | None) -> Any:
        """The compare-and-set transaction of ``new``'s node, not yet committed: ``create``
        when there is no node (``version`` None), else ``set_data`` at ``version``; with
        ``epoch``, after a check that the shard's lease epoch node still has it."""
        path = self.paths.checkpoint(new.stream_name, new.shard_id)
        tx = self.client.transaction()
        if epoch is not None:
            tx.check(self.paths.lease(new.stream_name, new.shard_id), epoch)
        if version is None:
            tx.create(path, encode_checkpoint(new), acl=self.acl)
        else:
            tx.set_data(path, encode_checkpoint(new), version)
        return tx

    def log_written(self, new: Checkpoint) -> None:
        """The DEBUG line of a checkpoint node written."""
        end = " (shard end)" if new.shard_end else ""
        path = self.paths.checkpoint(new.stream_name, new.shard_id)
        log.debug(
            "checkpoint %s -> %s:%s%s", path, new.sequence_number, new.sub_sequence_number, end
        )
