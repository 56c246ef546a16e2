"""The shard coordinator with a real spout (moto server) and a real ZooKeeper.

In-process workers, driven step by step, so each test can stop one mid-way:
flush before release, session expiry (the worker stops emitting until it owns
its shards again), a zombie's checkpoint refused, a ZooKeeper outage, and a
corrupt checkpoint node met while acquiring.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kit import spout_config

from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore
from kinesis_spout.coordination.coordinator import ShardCoordinator
from kinesis_spout.coordination.leases import LeaseState
from kinesis_spout.errors import CorruptCheckpointError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.records import Record
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.servers import KinesisMock, MotoServer, ZooKeeperServer
from kinesis_spout.testing.streams import (
    create_stream,
    emulator_client,
    make_payloads,
    put_records,
    wait_active,
)

pytestmark = pytest.mark.integration

JOB = "coord-job"


class Worker:
    """A spout, its ZooKeeper store and its coordinator, stepped by the test."""

    def __init__(
        self,
        url: str,
        stream: str,
        worker_id: str,
        endpoint: str,
        tmp: Path,
        refresh: float = 30.0,
        log: list[Record] | None = None,
        **cfg: Any,
    ):
        self.config = spout_config(
            under=tmp,
            stream_name=stream,
            endpoint_url=endpoint,
            checkpoint_store=url,
            job_name=JOB,
            worker_id=worker_id,
            **cfg,
        )
        self.store = ZooKeeperCheckpointStore.from_url(
            url, JOB, owner=worker_id, session_timeout=self.config.zk_session_timeout
        )
        client = emulator_client(endpoint)
        api = KinesisApi(client, stream)
        # Shard leases fence these workers (as the coordination worker): no job lease.
        self.spout = KinesisSpout(self.config, store=self.store, client=client, job_lease=False)
        try:
            self.spout.open()
        except BaseException:
            self.store.close()
            raise
        self.coordinator = ShardCoordinator(
            self.store,
            stream,
            self.spout,
            worker_id=worker_id,
            list_shards=lambda: [s.shard_id for s in api.list_shards()],
            retry_interval=0.2,
            drain_timeout=5.0,
            shard_refresh_interval=refresh,
        )
        self.coordinator.start()
        self.processed: list[Record] = []
        self.log = log if log is not None else []  # shared by workers: global order

    def step(self, ack: bool = True) -> list[Record]:
        self.coordinator.poll()
        batch = self.spout.next_batch(100)
        if ack:
            self.spout.ack_many(batch)
        self.processed.extend(batch)
        self.log.extend(batch)
        return batch

    def close(self) -> None:
        # Every step even if an earlier one raises (a worker stopped by a corrupt
        # checkpoint): a store left open keeps a ZooKeeper client reconnecting after
        # the suite ends ("Connection dropped: connection refused").
        try:
            self.coordinator.close()
        finally:
            try:
                self.spout.close()
            finally:
                self.store.close()


def run_until(
    cond: Callable[[], bool], workers: list[Worker], timeout: float = 30.0, what: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            states = {w.coordinator.worker_id: w.coordinator.lease_states() for w in workers}
            raise AssertionError(f"timed out: {what}; lease states {states}")
        for w in workers:
            w.step()
        time.sleep(0.01)


def expire_session(store: ZooKeeperCheckpointStore, hosts: str) -> None:
    """Close ``store``'s session from a twin connection: the server expires it now."""
    twin = KazooClient(hosts, client_id=store.client.client_id)
    twin.start()
    twin.stop()
    twin.close()


@pytest.fixture
def stream(moto_server: MotoServer, unique_name: str) -> str:
    client = emulator_client(moto_server.endpoint_url)
    create_stream(client, unique_name, 4)
    put_records(client, unique_name, make_payloads(400, size=32))
    return unique_name


@pytest.fixture
def make_worker(
    zookeeper: ZooKeeperServer,
    moto_server: MotoServer,
    stream: str,
    unique_name: str,
    tmp_path: Path,
) -> Iterator[Callable[..., Worker]]:
    made: list[Worker] = []

    def make(worker_id: str, url: str | None = None, **cfg: Any) -> Worker:
        w = Worker(
            url or zookeeper.url(f"/tests/{unique_name}"),
            stream,
            worker_id,
            moto_server.endpoint_url,
            tmp_path,
            **cfg,
        )
        made.append(w)
        return w

    yield make
    for w in made:
        with contextlib.suppress(Exception):  # a test may have broken its server
            w.close()


def held(w: Worker) -> set[str]:
    return set(w.coordinator.owned_shards)


def test_flush_before_release_and_handoff_without_duplicates(
    make_worker: Callable[..., Worker],
) -> None:
    # A checkpoint interval far longer than the test: only the release flush writes.
    a = make_worker("a", checkpoint_interval=600.0)
    run_until(lambda: len(held(a)) == 4, [a], what="a owns all 4 shards")
    run_until(lambda: len(a.processed) >= 400, [a], what="a reads everything")
    before = a.store.load(a.config.stream_name)
    assert before == {}  # nothing written yet: the interval has not passed

    b = make_worker("b", checkpoint_interval=600.0)
    run_until(lambda: len(held(a)) == 2 and len(held(b)) == 2, [a, b], what="a gives b 2 shards")
    moved = held(b)
    stored = a.store.load(a.config.stream_name)
    for shard in moved:
        last = max(r.key for r in a.processed if r.shard_id == shard)
        assert stored[shard].sequence_number == str(last.sequence), shard
        assert stored[shard].owner == "a"
    # b resumed after a's flushed checkpoint: no record of a moved shard twice.
    for _ in range(30):
        a.step()
        b.step()
    assert not [r for r in b.processed if r.shard_id in moved]


def test_session_expiry_stops_emitting_until_leases_are_back(
    make_worker: Callable[..., Worker], zookeeper: ZooKeeperServer
) -> None:
    w = make_worker("solo", checkpoint_interval=0.2)
    run_until(lambda: len(held(w)) == 4 and w.coordinator.emitting, [w], what="solo owns all")
    epochs = {s: w.store.lease_epoch(w.config.stream_name, s) for s in held(w)}
    old_session = w.store.session_id

    expire_session(w.store, zookeeper.hosts)
    deadline = time.monotonic() + 30
    while w.coordinator.emitting or w.store.session_id == old_session:
        assert time.monotonic() < deadline, "expiry not noticed"
        w.coordinator.poll()
        time.sleep(0.01)
    # Not emitting from the moment the loss is seen until the leases are re-taken.
    seen_stopped = False
    while not (len(held(w)) == 4 and w.coordinator.emitting):
        assert time.monotonic() < deadline, "leases not re-acquired"
        batch = w.step()
        if not w.coordinator.emitting:
            seen_stopped = True
            assert batch == [], "emitted while its leases were lost"
        time.sleep(0.01)
    assert seen_stopped
    for s in held(w):
        new_epoch = w.store.lease_epoch(w.config.stream_name, s)
        assert new_epoch is not None and new_epoch > (epochs[s] or 0)


def test_zombie_checkpoint_is_refused_after_takeover(
    make_worker: Callable[..., Worker], zookeeper: ZooKeeperServer
) -> None:
    z = make_worker("zombie", checkpoint_interval=600.0)
    run_until(lambda: len(held(z)) == 4, [z], what="zombie owns all")
    run_until(lambda: len(z.processed) >= 400, [z], what="zombie reads everything")
    stream = z.config.stream_name
    # The zombie stalls (a long GC pause, SIGSTOP): its session expires and a
    # new worker takes every shard over.
    expire_session(z.store, zookeeper.hosts)
    n = make_worker("successor", checkpoint_interval=0.1)
    run_until(lambda: len(held(n)) == 4, [n], what="successor takes over")
    run_until(lambda: len(n.store.load(stream)) == 4, [n], what="successor checkpoints")
    stored = n.store.load(stream)
    assert {cp.owner for cp in stored.values()} == {"successor"}

    # The zombie wakes up (without polling its coordinator) and flushes: refused.
    deadline = time.monotonic() + 30
    while not z.store.connected:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    z.spout.checkpoint(force=True)
    assert n.store.load(stream) == stored
    assert z.spout.stats().checkpoint_writes == 0


def test_zookeeper_outage_suspends_and_same_session_resumes(
    make_worker: Callable[..., Worker], tmp_path: Path, unique_name: str
) -> None:
    with ZooKeeperServer(workdir=tmp_path / "zk") as zk:
        w = make_worker("w", url=zk.url(f"/{unique_name}"), zk_session_timeout=30.0)
        run_until(lambda: len(held(w)) == 4 and w.coordinator.emitting, [w], what="owns all")
        epochs = {s: w.store.lease_epoch(w.config.stream_name, s) for s in held(w)}
        session = w.store.session_id
        zk.stop()
        run_until(lambda: not w.coordinator.emitting, [w], what="emitting stops")
        assert set(w.coordinator.lease_states().values()) == {LeaseState.SUSPENDED}
        for _ in range(20):
            assert w.step() == []
        zk.start()
        run_until(lambda: w.coordinator.emitting, [w], timeout=60, what="emitting resumes")
        assert w.store.session_id == session
        assert {s: w.store.lease_epoch(w.config.stream_name, s) for s in held(w)} == epochs


def test_corrupt_checkpoint_node_is_a_clear_error(
    make_worker: Callable[..., Worker], zookeeper: ZooKeeperServer, stream: str, unique_name: str
) -> None:
    a = make_worker("a")
    run_until(lambda: len(held(a)) == 4, [a], what="a owns all")
    raw = KazooClient(zookeeper.hosts)
    raw.start()
    try:
        path = f"/tests/{unique_name}/{JOB}/{stream}/shardId-000000000001"
        raw.ensure_path(path)
        raw.set(path, b"this is not json")
        # A worker starting now refuses to guess where to resume.
        with pytest.raises(CorruptCheckpointError, match=path):
            make_worker("b")
        # The running worker meets it at its next rebalance: an error, not a restart.
        raw.create(f"/tests/{unique_name}/{JOB}/{stream}/@workers/c", b"", ephemeral=True)
        with pytest.raises(CorruptCheckpointError, match="not valid JSON"):
            deadline = time.monotonic() + 30  # its watch fires on a thread of its own
            while time.monotonic() < deadline:
                a.step()
                time.sleep(0.01)
            raise AssertionError("worker a did not meet the new member node in 30 s of steps")
    finally:
        raw.stop()
        raw.close()


def test_children_start_on_another_worker_once_the_parent_ended(
    kinesis_mock: KinesisMock, zookeeper: ZooKeeperServer, unique_name: str, tmp_path: Path
) -> None:
    """A split parent and its children may be owned by different workers: the
    children's owner starts them only once the store says the parent ended."""
    client = emulator_client(kinesis_mock.endpoint_url)
    stream = unique_name
    create_stream(client, stream, 2)
    before = put_records(client, stream, make_payloads(200, size=32, prefix="a"))
    parent = "shardId-000000000000"
    info = next(
        s for s in client.list_shards(StreamName=stream)["Shards"] if s["ShardId"] == parent
    )
    lo, hi = (int(info["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    client.split_shard(
        StreamName=stream, ShardToSplit=parent, NewStartingHashKey=str((lo + hi) // 2)
    )
    wait_active(client, stream)
    after = put_records(client, stream, make_payloads(200, size=32, prefix="b"))
    children = {s for s, _ in after} - {s for s, _ in before}
    assert len(children) == 2

    url = zookeeper.url(f"/tests/{unique_name}")
    log: list[Record] = []
    workers = [
        Worker(
            url,
            stream,
            wid,
            kinesis_mock.endpoint_url,
            tmp_path,
            refresh=1.0,
            log=log,
            checkpoint_interval=0.2,
        )
        for wid in ("a", "b")
    ]
    try:
        run_until(lambda: len({r.message_id for r in log}) >= 400, workers, 60, "every record")
        owner_of_parent = {
            w.config.worker_id for w in workers if parent in {r.shard_id for r in w.processed}
        }
        owners_of_children = {
            w.config.worker_id for w in workers if children & {r.shard_id for r in w.processed}
        }
        assert owner_of_parent and owners_of_children - owner_of_parent, "no cross-worker lineage"
        first_child = min(i for i, r in enumerate(log) if r.shard_id in children)
        assert all(i < first_child for i, r in enumerate(log) if r.shard_id == parent)
        assert workers[0].store.load(stream)[parent].shard_end
        # The ended parent leaves the assignment: nobody holds it any more.
        run_until(
            lambda: all(parent not in held(w) for w in workers), workers, 30, "parent released"
        )
    finally:
        for w in workers:
            w.close()
