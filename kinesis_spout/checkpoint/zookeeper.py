"""The ZooKeeper checkpoint store (``zk://host:port[,host:port...]/root``), via kazoo.

Checkpoints are persistent nodes ``/<root>/<job>/<stream>/<shardId>`` beside the lease,
worker and batch-end nodes (the root acts as a chroot). Every write is compare-and-set on
the node's version, so a checkpoint never moves backwards; once a coordinator calls
:meth:`require_leases`, a write is also fenced on the shard's lease epoch in the same
transaction (:mod:`~kinesis_spout.checkpoint.zk_fencing`), so a zombie's write is refused.
While kazoo reports SUSPENDED or LOST nothing is sent, and a call that gets no answer in
``op_timeout`` is "unavailable" (retriable), never success. The layout and the rules:
docs/checkpoints.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL

from kinesis_spout.checkpoint.base import check_forward
from kinesis_spout.checkpoint.resets import ResetFence
from kinesis_spout.checkpoint.zk_connect import connect, forget
from kinesis_spout.checkpoint.zk_fencing import LeaseFence, taken_over
from kinesis_spout.checkpoint.zk_layout import ZkPaths
from kinesis_spout.checkpoint.zk_layout import check_component as _check_component
from kinesis_spout.checkpoint.zk_nodes import ZkNodes
from kinesis_spout.checkpoint.zk_reset import reset_node
from kinesis_spout.checkpoint.zk_round import save_round
from kinesis_spout.errors import (
    CheckpointError,
    CheckpointStoreUnavailableError,
)
from kinesis_spout.records import Checkpoint

log = logging.getLogger(__name__)


_CAS_ATTEMPTS = 20
_RETRIABLE = (
    ConnectionLoss,
    SessionExpiredError,
    OperationTimeoutError,
    KazooTimeoutError,
)


def _now() -> datetime:
    return datetime.now(UTC)


class ZooKeeperCheckpointStore:
    """Checkpoints of one job in ZooKeeper; see the module docstring.

    Build it with :meth:`from_url` (it then owns and closes its kazoo client)
    or pass a started ``KazooClient``. ``acl``: the ACL of every node created
    from ``/<root>/<job>`` down (``None`` = ZooKeeper's open ACL); the nodes of
    the root path itself are created open so several jobs can share it.

    The checkpoint protocol over ZooKeeper's nodes (load, compare-and-set, fencing,
    stream identity); the connection and the nodes' reads and transactions are
    :class:`~.zk_nodes.ZkNodes`', a reset and a round helpers of their own modules.
    """

    def __init__(
        self,
        client: KazooClient,
        root: str,
        job_name: str,
        *,
        owner: str = "",
        acl: list[ACL] | None = None,
        op_timeout: float = 10.0,
        own_client: bool = False,
        now: Callable[[], datetime] = _now,
        description: str = "",
    ) -> None:
        _check_component("job_name", job_name)
        self.job_name = job_name
        self.owner = owner
        self.paths = ZkPaths(root.rstrip("/"), job_name)
        self._own_client = own_client
        self._now = now
        self._description = description or f"root={root}"
        self.nodes = ZkNodes(
            client,
            self.paths,
            acl=acl,
            op_timeout=op_timeout,
            description=self._description,
            name=repr(self),
        )
        self._secrets: tuple[str, ...] = ()
        self._fence_of = LeaseFence(owner)
        self._resets = ResetFence()

    @classmethod
    def from_url(
        cls,
        url: str,
        job_name: str,
        *,
        owner: str = "",
        auth: str | None = None,
        session_timeout: float = 10.0,
        connect_timeout: float = 15.0,
    ) -> ZooKeeperCheckpointStore:
        """Connect to the ensemble of ``url`` and return a store owning the client.

        ``auth`` (``user:password``) is sent as digest credentials and every node
        created gets a digest ACL for that user only. The password never reaches
        a log line: kazoo's own logger masks it.
        """
        conn = connect(
            url,
            job_name,
            auth=auth,
            session_timeout=session_timeout,
            connect_timeout=connect_timeout,
        )
        store = cls(
            conn.client,
            conn.url.root,
            job_name,
            owner=owner,
            acl=conn.acl,
            op_timeout=min(max(session_timeout, 1.0), 10.0),
            own_client=True,
            description=str(conn.url),
        )
        store._secrets = conn.secrets
        return store

    def __repr__(self) -> str:
        return f"ZooKeeperCheckpointStore({self._description}, job={self.job_name!r})"

    # -- connection (the coordination's too) ------------------------------------------
    @property
    def client(self) -> KazooClient:
        """The kazoo client (shared with the shard coordinator)."""
        return self.nodes.client

    @property
    def acl(self) -> list[ACL] | None:
        """The ACL given to the nodes this store (and its coordinator) creates."""
        return self.nodes.acl

    @property
    def connected(self) -> bool:
        """True while kazoo reports CONNECTED (leases and writes can be trusted)."""
        return self.nodes.connected

    @property
    def session_id(self) -> int | None:
        """The current ZooKeeper session id, or None when not connected."""
        cid = self.nodes.client.client_id
        return int(cid[0]) if cid else None

    def wait(self, async_result: Any, what: str, expect: tuple[type[Exception], ...] = ()) -> Any:
        """:meth:`ZkNodes.wait <kinesis_spout.checkpoint.zk_nodes.ZkNodes.wait>`."""
        return self.nodes.wait(async_result, what, expect)

    def ensure_path(self, path: str) -> None:
        """:meth:`ZkNodes.ensure_path <kinesis_spout.checkpoint.zk_nodes.ZkNodes.ensure_path>`."""
        self.nodes.ensure_path(path)

    # -- the protocol ------------------------------------------------------------------
    def load(self, stream_name: str) -> dict[str, Checkpoint]:
        """Every checkpoint of ``stream_name``; a foreign or corrupt node raises
        :class:`~kinesis_spout.errors.CorruptCheckpointError` naming its path."""
        _check_component("stream_name", stream_name)
        self.nodes.check_usable(f"load {stream_name}")
        base = self.paths.stream(stream_name)
        client = self.nodes.client
        try:
            children = self.wait(client.get_children_async(base), f"list {base}", (NoNodeError,))
        except NoNodeError:
            return {}
        shards = sorted(c for c in children if not c.startswith("@"))
        pending = [(s, client.get_async(f"{base}/{s}")) for s in shards]
        out: dict[str, Checkpoint] = {}
        for shard, res in pending:
            path = f"{base}/{shard}"
            try:
                data, _stat = self.wait(res, f"read {path}", (NoNodeError,))
            except NoNodeError:
                continue
            out[shard] = self.nodes.decode(data, path, stream_name, shard)
        self._resets.loaded(stream_name, out)
        return out

    def save(self, checkpoint: Checkpoint) -> Checkpoint:
        """Compare-and-set ``checkpoint`` (fenced by the lease when required)."""
        cp = self._stamped(checkpoint)
        return self._cas(cp.stream_name, cp.shard_id, lambda stored: cp)

    def save_many(self, checkpoints: Sequence[Checkpoint]) -> list[Checkpoint | CheckpointError]:
        """A round, its reads and writes in flight together (:func:`~.zk_round.save_round`)."""
        cps = [self._stamped(cp) for cp in checkpoints]  # every name checked before any write
        return save_round(self.nodes, self._fence_of, self._resets, self._now, cps, self.save)

    def _stamped(self, checkpoint: Checkpoint) -> Checkpoint:
        """``checkpoint`` as this store writes it (its names checked): the job's name, and
        this store's owner unless it names one."""
        _check_component("stream_name", checkpoint.stream_name)
        _check_component("shard_id", checkpoint.shard_id)
        return replace(checkpoint, job_name=self.job_name, owner=checkpoint.owner or self.owner)

    def mark_ended(self, stream_name: str, shard_id: str, owner: str) -> Checkpoint:
        """Set ``shard_end`` keeping the stored position (CAS, fenced like ``save``)."""
        _check_component("stream_name", stream_name)
        _check_component("shard_id", shard_id)

        def ended(stored: Checkpoint | None) -> Checkpoint:
            return Checkpoint(
                stream_name,
                shard_id,
                stored.sequence_number if stored else None,
                stored.sub_sequence_number if stored else 0,
                shard_end=True,
                job_name=self.job_name,
                owner=owner or self.owner,
            )

        return self._cas(stream_name, shard_id, ended)

    def reset(self, stream_name: str, shard_id: str, checkpoint: Checkpoint) -> Checkpoint:
        """See :meth:`CheckpointStore.reset` (:func:`~.zk_reset.reset_node`)."""
        return reset_node(self.nodes, self.owner, self._now, stream_name, shard_id, checkpoint)

    def claim_stream(self, stream_name: str, identity: str) -> str | None:
        """See :meth:`CheckpointStore.claim_stream`: the identity is the data of
        ``<stream>/@identity``; a recreated stream's checkpoints move to
        ``<job>/@retired/<stream>-<old identity>/`` in the transaction that records the
        new identity (so two workers claiming at once move them once)."""
        _check_component("stream_name", stream_name)
        self.nodes.check_usable(f"claim {stream_name}")
        base = self.paths.stream(stream_name)
        marker = f"{base}/@identity"
        self.ensure_path(base)
        for _ in range(_CAS_ATTEMPTS):
            try:
                data, stat = self.wait(
                    self.client.get_async(marker), f"read {marker}", (NoNodeError,)
                )
                old: str | None = data.decode() or None
                version: int | None = int(stat.version)
            except NoNodeError:
                old, version = None, None
            if old == identity:
                return None
            tx = self.client.transaction()
            if version is None:
                tx.create(marker, identity.encode(), acl=self.acl)
            else:
                tx.set_data(marker, identity.encode(), version)
            if old is not None:
                self._retire(tx, stream_name, old)
            results = self.wait(tx.commit_async(), f"write {marker}")
            if not any(isinstance(r, Exception) for r in results):
                return old
            log.debug("%s changed concurrently; re-reading", marker)
        raise CheckpointStoreUnavailableError(
            f"claim {stream_name}: {_CAS_ATTEMPTS} attempts lost to concurrent writers"
        )

    def _retire(self, tx: Any, stream_name: str, old: str) -> None:
        """Add to ``tx`` the move of every checkpoint of ``stream_name`` aside."""
        base = self.paths.stream(stream_name)
        stamp = "".join(c if c.isalnum() else "-" for c in old)
        aside = f"{self.paths.job_path}/@retired/{stream_name}-{stamp}"
        self.ensure_path(aside)
        children = self.wait(self.client.get_children_async(base), f"list {base}")
        for shard in sorted(c for c in children if not c.startswith("@")):
            path = f"{base}/{shard}"
            data, stat = self.wait(self.client.get_async(path), f"read {path}")
            tx.create(f"{aside}/{shard}", data, acl=self.acl)
            tx.delete(path, int(stat.version))

    def close(self) -> None:
        if self.nodes.closed:
            return
        self.nodes.close()
        if self._own_client:
            try:
                self.nodes.client.stop()
            finally:
                self.nodes.client.close()
                forget(self._secrets)
        log.info("closed %r", self)

    # -- fencing (used by kinesis_spout.coordination) ---------------------------------
    def require_leases(self, stream_name: str, required: bool = True) -> None:
        """From now on, writes for ``stream_name`` need a lease epoch (see :meth:`set_lease`)."""
        self._fence_of.require(stream_name, required)

    def set_lease(self, stream_name: str, shard_id: str, epoch: int | None) -> None:
        """Record (or with ``None`` forget) the epoch version of this worker's lease."""
        self._fence_of.set(stream_name, shard_id, epoch)

    def lease_epoch(self, stream_name: str, shard_id: str) -> int | None:
        return self._fence_of.epoch(stream_name, shard_id)

    # -- internals ---------------------------------------------------------------------
    def _check_epoch(self, stream: str, shard: str, epoch: int, owner: str) -> None:
        """:class:`StaleCheckpointError` unless the lease node still has version ``epoch``."""
        path = self.paths.lease(stream, shard)
        try:
            _, stat = self.wait(self.client.get_async(path), f"read {path}", (NoNodeError,))
        except NoNodeError:
            raise taken_over(stream, shard, epoch, owner) from None
        if int(stat.version) != epoch:
            raise taken_over(stream, shard, epoch, owner)

    def _cas(
        self, stream: str, shard: str, build: Callable[[Checkpoint | None], Checkpoint]
    ) -> Checkpoint:
        what = f"checkpoint {stream}/{shard}"
        self.nodes.check_usable(what)
        path = self.paths.checkpoint(stream, shard)
        self.ensure_path(self.paths.stream(stream))
        for _ in range(_CAS_ATTEMPTS):
            epoch = self._fence_of.for_write(stream, shard)
            stored, version = self.nodes.read_checkpoint(stream, shard)
            new = self._resets.carry(stored, replace(build(stored), updated_at=self._now()))
            if not check_forward(stored, new):
                assert stored is not None
                if epoch is not None:
                    # Nothing to write, but a stale owner must still hear it is stale.
                    self._check_epoch(stream, shard, epoch, new.owner)
                return stored
            self.nodes.check_usable(what)
            tx = self.nodes.checkpoint_tx(new, version, epoch)
            results = self.wait(tx.commit_async(), f"write {path}")
            errors = [r for r in results if isinstance(r, Exception)]
            if not errors:
                self.nodes.log_written(new)
                return new
            first = results[0]
            if epoch is not None and isinstance(first, BadVersionError | NoNodeError):
                raise taken_over(stream, shard, epoch, new.owner)
            if not any(isinstance(e, BadVersionError | NodeExistsError) for e in errors):
                err = errors[0]
                if isinstance(err, NoAuthError):
                    raise CheckpointError(f"ZooKeeper refused writing {path}: NoAuthError")
                raise CheckpointError(f"writing {path} failed: {err!r}")
            log.debug("checkpoint %s changed concurrently; re-reading", path)
        raise CheckpointStoreUnavailableError(
            f"{what}: {_CAS_ATTEMPTS} compare-and-set attempts lost to concurrent writers"
        )
