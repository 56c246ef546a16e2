"""A corrupt or foreign checkpoint is a clear error, never a silent restart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from kinesis_spout.checkpoint import open_store
from kinesis_spout.checkpoint.file import FileCheckpointStore
from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore
from kinesis_spout.errors import CorruptCheckpointError
from kinesis_spout.records import Checkpoint

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"


@pytest.fixture
def zk_store(zk_url: str) -> Iterator[ZooKeeperCheckpointStore]:
    store = open_store(zk_url, "billing", owner="w1")
    assert isinstance(store, ZooKeeperCheckpointStore)
    yield store
    store.close()


def test_zk_node_that_is_not_json(zk_store: ZooKeeperCheckpointStore, raw_zk: KazooClient) -> None:
    zk_store.save(Checkpoint("orders", SHARD, "5"))
    path = zk_store.paths.checkpoint("orders", SHARD)
    raw_zk.set(path, b"\x00garbage{")
    with pytest.raises(CorruptCheckpointError, match="not valid JSON") as info:
        zk_store.load("orders")
    assert path in str(info.value)
    # A write must not paper over it either.
    with pytest.raises(CorruptCheckpointError, match=path):
        zk_store.save(Checkpoint("orders", SHARD, "6"))
    assert raw_zk.get(path)[0] == b"\x00garbage{"


def test_zk_node_from_another_stream(
    zk_store: ZooKeeperCheckpointStore, raw_zk: KazooClient
) -> None:
    zk_store.save(Checkpoint("payments", SHARD, "9000"))
    data, _ = raw_zk.get(zk_store.paths.checkpoint("payments", SHARD))
    # Someone copied the node (or two configs point at one path).
    raw_zk.create(zk_store.paths.checkpoint("orders", SHARD), data, makepath=True)
    with pytest.raises(CorruptCheckpointError, match="stream 'payments', not 'orders'"):
        zk_store.load("orders")


def test_zk_node_written_by_another_job(
    zk_store: ZooKeeperCheckpointStore, raw_zk: KazooClient
) -> None:
    zk_store.save(Checkpoint("orders", SHARD, "10"))
    path = zk_store.paths.checkpoint("orders", SHARD)
    obj = json.loads(raw_zk.get(path)[0])
    obj["job"] = "reporting"
    raw_zk.set(path, json.dumps(obj).encode())
    with pytest.raises(CorruptCheckpointError, match="job 'reporting', not 'billing'"):
        zk_store.load("orders")


def test_zk_node_with_a_bad_sequence(
    zk_store: ZooKeeperCheckpointStore, raw_zk: KazooClient
) -> None:
    zk_store.save(Checkpoint("orders", SHARD, "10"))
    path = zk_store.paths.checkpoint("orders", SHARD)
    obj = json.loads(raw_zk.get(path)[0])
    obj["sequence"] = "-12"
    raw_zk.set(path, json.dumps(obj).encode())
    with pytest.raises(CorruptCheckpointError, match="'-12'"):
        zk_store.load("orders")


def test_file_that_is_not_json(tmp_path: Path) -> None:
    store = FileCheckpointStore(tmp_path, "billing")
    store.save(Checkpoint("orders", SHARD, "5"))
    path = store.path("orders")
    path.write_text('{"format": 1, "shards": {')
    with pytest.raises(CorruptCheckpointError, match=str(path)):
        store.load("orders")
    with pytest.raises(CorruptCheckpointError):
        store.save(Checkpoint("orders", SHARD, "6"))


def test_file_of_another_stream(tmp_path: Path) -> None:
    store = FileCheckpointStore(tmp_path, "billing")
    store.save(Checkpoint("payments", SHARD, "5"))
    store.path("orders").write_bytes(store.path("payments").read_bytes())
    with pytest.raises(CorruptCheckpointError, match="stream 'payments', not 'orders'"):
        store.load("orders")


def test_file_entry_missing_fields(tmp_path: Path) -> None:
    store = FileCheckpointStore(tmp_path, "billing")
    store.save(Checkpoint("orders", SHARD, "5"))
    doc = json.loads(store.path("orders").read_text())
    del doc["shards"][SHARD]["sequence"]
    store.path("orders").write_text(json.dumps(doc))
    with pytest.raises(CorruptCheckpointError, match="lacks field"):
        store.load("orders")


def test_file_write_is_atomic_and_leaves_no_temp_files(tmp_path: Path) -> None:
    store = FileCheckpointStore(tmp_path, "billing")
    for n in range(1, 30):
        store.save(Checkpoint("orders", SHARD, str(n)))
    names = sorted(p.name for p in (tmp_path / "billing").iterdir())
    assert names == [".orders.lock", "orders.json"]
    doc = json.loads(store.path("orders").read_text())
    assert doc["shards"][SHARD]["sequence"] == "29"
