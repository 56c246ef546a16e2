"""The batch-end records of a ``zk://`` checkpoint store (:mod:`.batch_ends`).

Node layout under the URL's root (:mod:`.zk_layout`)::

    /<root>/<job>/<stream>/@batches/run-<run>/<batch, 12 digits>/<shard>   a record
    /<root>/<job>/<stream>/@batches/run-<run>/floor                        the floor

A record's node is created only if absent, so the first writer wins. The store
connects and talks as the checkpoint store does (:func:`~.zk_connect.connect`,
:class:`~.zk_nodes.ZkNodes`): digest ACLs on the job's nodes (the root path's
stay open for other jobs), each call bounded in time, kazoo's errors translated
into :class:`~kinesis_spout.errors.CheckpointError` (retriable ones into
:class:`~kinesis_spout.errors.CheckpointStoreUnavailableError`).
"""

from __future__ import annotations

import contextlib

from kazoo.exceptions import NodeExistsError, NoNodeError

from kinesis_spout.checkpoint.batch_ends import (
    BatchEnd,
    decode_end,
    decode_floor,
    encode_end,
    removed_error,
    run_dir,
)
from kinesis_spout.checkpoint.zk_connect import connect, forget
from kinesis_spout.checkpoint.zk_layout import ZkPaths
from kinesis_spout.checkpoint.zk_nodes import ZkNodes

OP_TIMEOUT = 10.0
"""Seconds one ZooKeeper call may take (the checkpoint store's at its default session)."""


class ZkBatchEnds:
    """``zk://``: one node per record, created only if absent (first writer wins)."""

    def __init__(self, url: str, job: str, stream: str, auth: str | None = None) -> None:
        conn = connect(url, job, auth=auth, session_timeout=10.0, connect_timeout=15.0)
        self.nodes = ZkNodes(
            conn.client,
            ZkPaths(conn.url.root, job),
            acl=conn.acl,
            op_timeout=OP_TIMEOUT,
            description=str(conn.url),
            name=f"batch-end store {conn.url} of job {job!r}",
        )
        self.hosts = conn.url.hosts
        self.base = self.nodes.paths.batches(stream)
        self._secrets = conn.secrets

    def _dir(self, run: str) -> str:
        return f"{self.base}/{run_dir(run)}" if run else self.base

    def where(self, run: str, batch: int, shard: str) -> str:
        return f"zk://{self.hosts}{self._dir(run)}/{batch:012d}/{shard}"

    def get(self, run: str, batch: int, shard: str) -> BatchEnd | None:
        path = f"{self._dir(run)}/{batch:012d}/{shard}"
        data = self._read(path)
        return None if data is None else decode_end(data, self.where(run, batch, shard))

    def record(self, run: str, batch: int, shard: str, end: BatchEnd) -> BatchEnd:
        batch_node = f"{self._dir(run)}/{batch:012d}"
        path = f"{batch_node}/{shard}"
        if not self._create(path, encode_end(end)):  # the batch's first record: its nodes
            self.nodes.ensure_path(self.base)
            for parent in (self._dir(run), batch_node):
                self._create(parent, b"")
            self._create(path, encode_end(end))  # not if the batch went meanwhile: see below
        floor = self.floor(run)  # after the create: a cleanup that raced us is seen here
        if batch < floor:
            self._remove(batch_node)
            raise removed_error(self.where(run, batch, shard), batch, floor)
        got = self.get(run, batch, shard)
        assert got is not None
        return got

    def floor(self, run: str) -> int:
        path = f"{self._dir(run)}/floor"
        data = self._read(path)
        return 0 if data is None else decode_floor(data, f"zk://{self.hosts}{path}")

    def forget_before(self, run: str, batch: int) -> int:
        nodes, d = self.nodes, self._dir(run)
        if nodes.wait(nodes.client.exists_async(d), f"read {d}") is None:
            return 0
        if batch > self.floor(run):  # the floor first: a leftover attempt then sees it
            floor, data = f"{d}/floor", str(batch).encode()
            try:
                nodes.wait(
                    nodes.client.create_async(floor, data, acl=nodes.acl),
                    f"create {floor}",
                    (NodeExistsError,),
                )
            except NodeExistsError:
                nodes.wait(nodes.client.set_async(floor, data), f"write {floor}")
        names = self._children(d)  # listed after the floor is up
        gone = [name for name in names if name.isdigit() and int(name) < batch]
        for name in gone:
            self._remove(f"{d}/{name}")
        return len(gone)

    def close(self) -> None:
        if self.nodes.closed:
            return
        self.nodes.close()
        try:
            self.nodes.client.stop()
        finally:
            self.nodes.client.close()
            forget(self._secrets)

    # -- calls -------------------------------------------------------------------------
    def _read(self, path: str) -> bytes | None:
        """The data of ``path``, or None: no such node."""
        nodes = self.nodes
        try:
            data, _ = nodes.wait(nodes.client.get_async(path), f"read {path}", (NoNodeError,))
        except NoNodeError:
            return None
        return bytes(data)

    def _children(self, path: str) -> list[str]:
        nodes = self.nodes
        try:
            names = nodes.wait(
                nodes.client.get_children_async(path), f"list {path}", (NoNodeError,)
            )
        except NoNodeError:
            return []
        return list(names)

    def _create(self, path: str, data: bytes) -> bool:
        """Create ``path`` with the job's ACL unless it exists; False: its parent does not."""
        nodes = self.nodes
        try:
            nodes.wait(
                nodes.client.create_async(path, data, acl=nodes.acl),
                f"create {path}",
                (NodeExistsError, NoNodeError),
            )
        except NodeExistsError:
            pass
        except NoNodeError:
            return False
        return True

    def _remove(self, path: str) -> None:
        """Remove a batch's node and its records (what is gone already is fine)."""
        nodes = self.nodes
        for name in self._children(path):
            with contextlib.suppress(NoNodeError):
                nodes.wait(
                    nodes.client.delete_async(f"{path}/{name}"),
                    f"delete {path}/{name}",
                    (NoNodeError,),
                )
        with contextlib.suppress(NoNodeError):
            nodes.wait(nodes.client.delete_async(path), f"delete {path}", (NoNodeError,))
