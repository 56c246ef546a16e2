"""Fixtures of the checkpoint-store and coordination tests.

``store_factory`` builds stores of one kind ("file", "zk", "dynamodb" or
"dynamodb-fenced") that share one backing place (a directory, a ZooKeeper root or a
DynamoDB table unique to the test), so a test can open a second store to play a
restart or a concurrent writer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from kinesis_spout.checkpoint import CheckpointStore, open_store
from kinesis_spout.checkpoint.joblease import JobLease, open_job_lease
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


@pytest.fixture(params=["file", "zk", "dynamodb"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Each store. The contract suite adds "dynamodb-fenced": the DynamoDB store while this
    process holds the job's lease (its writes are transactions with a check of the lease)."""
    return str(request.param)


@pytest.fixture
def store_url(store_kind: str, store_url_of: Callable[[str], str]) -> str:
    return store_url_of(store_kind.removesuffix("-fenced"))


@pytest.fixture
def store_factory(store_url: str, store_kind: str, unique_name: str) -> Iterator[StoreFactory]:
    """``make(job=None, owner="w1")``: a new store on the shared backing place."""
    stores: list[CheckpointStore] = []
    leases: dict[str, JobLease] = {}

    def make(job: str | None = None, owner: str = "w1") -> CheckpointStore:
        job = job or f"job-{unique_name}"
        if store_kind.endswith("-fenced") and job not in leases:
            leases[job] = open_job_lease(store_url, job)
            leases[job].acquire()
        store = open_store(store_url, job, owner=owner)
        stores.append(store)
        return store

    yield make
    for s in stores:
        s.close()
    for lease in leases.values():
        lease.release()
