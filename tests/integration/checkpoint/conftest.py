"""Fixtures of the checkpoint-store and coordination tests.

``store_factory`` builds stores of one kind ("file" or "zk") that share one
backing place (a directory, or a ZooKeeper root unique to the test), so a test
can open a second store to play a restart or a concurrent writer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from kinesis_spout.checkpoint import CheckpointStore, open_store
from kinesis_spout.checkpoint.zk_layout import ZkUrl
from kinesis_spout.testing.servers import ZooKeeperServer

StoreFactory = Callable[..., CheckpointStore]


@pytest.fixture
def zk_url(zookeeper: ZooKeeperServer, unique_name: str) -> str:
    """A ZooKeeper URL whose root is unique to this test."""
    return zookeeper.url(f"/tests/{unique_name}")


@pytest.fixture
def raw_zk(zk_url: str) -> Iterator[KazooClient]:
    """A plain kazoo client on the test's ZooKeeper, to play an operator or another
    worker writing nodes behind a store's back."""
    client = KazooClient(ZkUrl.parse(zk_url).hosts)
    client.start()
    yield client
    client.stop()
    client.close()


@pytest.fixture(params=["file", "zk"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if store_kind == "file":
        return f"file://{tmp_path / 'checkpoints'}"
    return str(request.getfixturevalue("zk_url"))


@pytest.fixture
def store_factory(store_url: str, unique_name: str) -> Iterator[StoreFactory]:
    """``make(job=None, owner="w1")``: a new store on the shared backing place."""
    stores: list[CheckpointStore] = []

    def make(job: str | None = None, owner: str = "w1") -> CheckpointStore:
        store = open_store(store_url, job or f"job-{unique_name}", owner=owner)
        stores.append(store)
        return store

    yield make
    for s in stores:
        s.close()
