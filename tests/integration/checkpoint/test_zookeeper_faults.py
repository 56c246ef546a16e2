"""ZooKeeper going away under a writer: no checkpoint lost, none moved backwards.

A writer thread saves ever larger positions while the server is stopped and
restarted, the session is expired, or the leader of a 3-node ensemble is
killed. Every save either succeeds (and is then durable) or raises a
retriable ``CheckpointStoreUnavailableError``; nothing else, and the value
read back at the end is the last one reported saved.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState

from kinesis_spout.checkpoint import open_store
from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore
from kinesis_spout.errors import CheckpointStoreUnavailableError, KinesisSpoutError
from kinesis_spout.records import Checkpoint
from kinesis_spout.testing.servers import ZooKeeperEnsemble, ZooKeeperServer

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"


class Writer:
    """Saves 1, 2, 3, ... in a thread; records what succeeded and what failed."""

    def __init__(self, store: ZooKeeperCheckpointStore, stream: str = "orders") -> None:
        self.store = store
        self.stream = stream
        self.saved: list[int] = []
        self.unavailable = 0
        self.other_errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            try:
                got = self.store.save(Checkpoint(self.stream, SHARD, str(n)))
                self.saved.append(int(got.sequence_number or 0))
            except CheckpointStoreUnavailableError as exc:
                assert exc.retriable
                self.unavailable += 1
                time.sleep(0.02)
            except BaseException as exc:
                self.other_errors.append(exc)
                return
            time.sleep(0.005)

    def start(self) -> Writer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()

    def successes_after(self, count: int, timeout: float = 60.0) -> None:
        """Wait until ``count`` more saves succeeded."""
        target = len(self.saved) + count
        wait_for(lambda: len(self.saved) >= target or bool(self.other_errors), timeout)
        assert not self.other_errors, self.other_errors

    def check(self, reader: ZooKeeperCheckpointStore) -> None:
        assert not self.other_errors, self.other_errors
        assert self.saved, "nothing was ever saved"
        assert all(a < b for a, b in zip(self.saved, self.saved[1:], strict=False)), (
            "a reported save moved backwards"
        )
        stored = reader.load(self.stream)[SHARD]
        # Last reported success is durable; a write whose answer was lost may be
        # ahead of it, never behind.
        assert int(stored.sequence_number or 0) >= self.saved[-1]


def wait_for(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.02)


def zk_open(url: str, **kw: object) -> ZooKeeperCheckpointStore:
    store = open_store(url, "billing", owner="w1", **kw)  # type: ignore[arg-type]
    assert isinstance(store, ZooKeeperCheckpointStore)
    return store


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A server of this test only: it gets stopped."""
    with ZooKeeperServer(workdir=tmp_path / "zk") as server:
        yield server


def test_server_stopped_and_restarted_mid_run(
    own_zookeeper: ZooKeeperServer, unique_name: str
) -> None:
    url = own_zookeeper.url(f"/{unique_name}")
    store = zk_open(url, zk_session_timeout=30.0)
    states: list[str] = []
    store.client.add_listener(states.append)
    writer = Writer(store).start()
    try:
        writer.successes_after(20)
        own_zookeeper.stop()
        wait_for(lambda: not store.connected, 30)
        before = len(writer.saved)
        unavailable = writer.unavailable
        wait_for(lambda: writer.unavailable >= unavailable + 5, 30)
        assert len(writer.saved) == before, "a save claimed success with ZooKeeper down"

        own_zookeeper.start()
        writer.successes_after(20)
    finally:
        writer.stop()
    assert KazooState.SUSPENDED in states
    reader = zk_open(url)
    try:
        writer.check(reader)
    finally:
        reader.close()
        store.close()


def expire_session(client: KazooClient, hosts: str) -> None:
    """Expire ``client``'s session from the server side (kazoo's old test trick):
    a second client joins the same session id and password, then closes it."""
    session_id, password = client.client_id
    twin = KazooClient(hosts, client_id=(session_id, password))
    twin.start()
    twin.stop()
    twin.close()


def test_session_expired_mid_run(zookeeper: ZooKeeperServer, unique_name: str) -> None:
    url = zookeeper.url(f"/{unique_name}")
    store = zk_open(url)
    states: list[str] = []
    store.client.add_listener(states.append)
    old_session = store.session_id
    writer = Writer(store).start()
    try:
        writer.successes_after(20)
        expire_session(store.client, zookeeper.hosts)
        wait_for(lambda: KazooState.LOST in states, 30)
        wait_for(lambda: store.connected and store.session_id != old_session, 30)
        writer.successes_after(20)
    finally:
        writer.stop()
    reader = zk_open(url)
    try:
        writer.check(reader)
    finally:
        reader.close()
        store.close()


def test_ensemble_leader_killed_mid_run(tmp_path: Path, unique_name: str) -> None:
    with ZooKeeperEnsemble(3, workdir=tmp_path / "ensemble") as ensemble:
        url = ensemble.url(f"/{unique_name}")
        store = zk_open(url)
        writer = Writer(store).start()
        try:
            writer.successes_after(30)
            leader = ensemble.leader()
            leader.stop(kill=True)
            ensemble.wait_for_quorum(60)
            writer.successes_after(30)
            # And a second failover, of the new leader.
            ensemble.leader().stop(kill=True)
            time.sleep(0.5)
            assert not writer.other_errors
        finally:
            writer.stop()
        # One node left of three: no quorum. Restart one and read back.
        for node in ensemble.nodes:
            if not node.running:
                node.start()
                break
        ensemble.wait_for_quorum(60)
        reader = zk_open(url)
        try:
            writer.check(reader)
        finally:
            reader.close()
            store.close()


def test_unavailable_is_fast_and_retriable_while_disconnected(
    own_zookeeper: ZooKeeperServer, unique_name: str
) -> None:
    store = zk_open(own_zookeeper.url(f"/{unique_name}"), zk_session_timeout=30.0)
    try:
        store.save(Checkpoint("orders", SHARD, "1"))
        own_zookeeper.stop()
        wait_for(lambda: not store.connected, 30)
        with pytest.raises(CheckpointStoreUnavailableError) as info:
            store.save(Checkpoint("orders", SHARD, "2"))
        assert info.value.retriable
        with pytest.raises(CheckpointStoreUnavailableError):
            store.load("orders")
        assert isinstance(info.value, KinesisSpoutError)
        own_zookeeper.start()
        wait_for(lambda: store.connected, 60)
        store.save(Checkpoint("orders", SHARD, "2"))
        assert store.load("orders")[SHARD].sequence_number == "2"
    finally:
        store.close()
