"""A corrupt or foreign checkpoint is a clear error, never a silent restart (file,
ZooKeeper and DynamoDB stores)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
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


# --- DynamoDB (moto's server over HTTP) ---------------------------------------------------


def raw_dynamodb(endpoint: str) -> Any:
    """A plain DynamoDB client, to play an operator editing items behind the store's back."""
    return boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")


def test_dynamodb_item_that_is_not_json_even_with_its_version_kept(
    dynamodb: str, unique_name: str
) -> None:
    url = f"dynamodb://{unique_name}"
    store = open_store(url, "billing", owner="w1")
    try:
        store.save(Checkpoint("orders", SHARD, "5"))
        raw = raw_dynamodb(dynamodb)
        key = {"pk": {"S": "billing/orders"}, "sk": {"S": SHARD}}
        # Edited by hand, the version left as it was.
        raw.update_item(
            TableName=unique_name,
            Key=key,
            UpdateExpression="SET #c = :c",
            ExpressionAttributeNames={"#c": "checkpoint"},
            ExpressionAttributeValues={":c": {"S": "\x00garbage{"}},
        )
        where = f"dynamodb://{unique_name}/billing/orders/{SHARD}"
        with pytest.raises(CorruptCheckpointError, match="not valid JSON") as info:
            open_store(url, "billing").load("orders")
        assert where in str(info.value)
        # The store that saved before must not paper over it with its next write.
        with pytest.raises(CorruptCheckpointError, match=where):
            store.save(Checkpoint("orders", SHARD, "6"))
        item = raw.get_item(TableName=unique_name, Key=key, ConsistentRead=True)["Item"]
        assert item["checkpoint"]["S"] == "\x00garbage{"
    finally:
        store.close()


def test_dynamodb_item_of_another_stream(dynamodb: str, unique_name: str) -> None:
    url = f"dynamodb://{unique_name}"
    store = open_store(url, "billing")
    try:
        store.save(Checkpoint("payments", SHARD, "9000"))
        raw = raw_dynamodb(dynamodb)
        item = raw.get_item(
            TableName=unique_name, Key={"pk": {"S": "billing/payments"}, "sk": {"S": SHARD}}
        )["Item"]
        raw.put_item(TableName=unique_name, Item={**item, "pk": {"S": "billing/orders"}})
        with pytest.raises(CorruptCheckpointError, match="stream 'payments', not 'orders'"):
            store.load("orders")
    finally:
        store.close()
