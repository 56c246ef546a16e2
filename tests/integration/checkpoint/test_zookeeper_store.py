"""ZooKeeper-only behaviour: digest ACLs, secrets kept out of logs, lease fencing."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from kinesis_spout.checkpoint import open_store
from kinesis_spout.checkpoint.zk_layout import ZkUrl
from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore
from kinesis_spout.errors import CheckpointError, StaleCheckpointError
from kinesis_spout.records import Checkpoint

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"
SECRET = "s3cr3t-Pa55word"


def zk_open(url: str, job: str = "billing", **kw: object) -> ZooKeeperCheckpointStore:
    store = open_store(url, job, **kw)  # type: ignore[arg-type]
    assert isinstance(store, ZooKeeperCheckpointStore)
    return store


def test_digest_acl_protects_nodes_and_password_never_logged(
    zk_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(1)  # everything, kazoo's BLATHER and DEBUG included
    store = zk_open(zk_url, owner="w1", zk_auth=f"spout:{SECRET}")
    try:
        store.save(Checkpoint("orders", SHARD, "77"))
        assert store.load("orders")[SHARD].sequence_number == "77"
        path = store.paths.checkpoint("orders", SHARD)

        anonymous = KazooClient(ZkUrl.parse(zk_url).hosts)
        anonymous.start()
        try:
            with pytest.raises(NoAuthError):
                anonymous.get(path)
            with pytest.raises(NoAuthError):
                anonymous.set(path, b"{}")
        finally:
            anonymous.stop()
            anonymous.close()

        wrong = zk_open(zk_url, zk_auth="spout:wrong-password")
        try:
            with pytest.raises(CheckpointError, match="NoAuth"):
                wrong.load("orders")
        finally:
            wrong.close()
    finally:
        store.close()

    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "Auth(" in text or "digest" in text.lower(), "expected kazoo's auth request in the log"
    assert SECRET not in text
    assert "wrong-password" not in text
    assert SECRET not in repr(store)


def test_url_must_not_carry_credentials() -> None:
    from kinesis_spout.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        ZkUrl.parse(f"zk://spout:{SECRET}@127.0.0.1:2181/root")
    assert SECRET not in str(info.value)


def _bump_epoch(raw: KazooClient, store: ZooKeeperCheckpointStore, shard: str) -> int:
    path = store.paths.lease("orders", shard)
    raw.ensure_path(path)
    return int(raw.set(path, b"{}").version)


def test_fenced_writes_need_the_current_lease_epoch(zk_url: str, raw_zk: KazooClient) -> None:
    store = zk_open(zk_url, owner="w1")
    try:
        store.save(Checkpoint("orders", SHARD, "10"))  # unfenced: fine
        store.require_leases("orders")
        with pytest.raises(StaleCheckpointError, match="holds no lease"):
            store.save(Checkpoint("orders", SHARD, "11"))

        store.set_lease("orders", SHARD, _bump_epoch(raw_zk, store, SHARD))
        store.save(Checkpoint("orders", SHARD, "12"))

        _bump_epoch(raw_zk, store, SHARD)  # another worker acquired the lease
        with pytest.raises(StaleCheckpointError, match="taken over"):
            store.save(Checkpoint("orders", SHARD, "13"))
        with pytest.raises(StaleCheckpointError, match="taken over"):
            store.mark_ended("orders", SHARD, "w1")
        # Even a write that would change nothing: the stale owner must hear it.
        with pytest.raises(StaleCheckpointError, match="taken over"):
            store.save(Checkpoint("orders", SHARD, "12"))
        assert store.load("orders")[SHARD].sequence_number == "12"
        assert not store.load("orders")[SHARD].shard_end
    finally:
        store.close()
