"""The ZooKeeper store's checkpoint round (``save_many``): its calls in flight together,
and every shard that is not the plain case given the outcome ``save`` would give it.

Rounds used to save shard by shard: a read and a write, each waited for, per shard
(1.26 s a round at 1,000 shards on a local server).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from kinesis_spout.checkpoint import open_store
from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore
from kinesis_spout.errors import CheckpointError, CorruptCheckpointError, StaleCheckpointError
from kinesis_spout.records import Checkpoint

pytestmark = pytest.mark.integration

STREAM = "orders"


def shard(i: int) -> str:
    return f"shardId-{i:012d}"


@pytest.fixture
def stores(zk_url: str) -> Iterator[Callable[[str], ZooKeeperCheckpointStore]]:
    opened: list[ZooKeeperCheckpointStore] = []

    def make(owner: str) -> ZooKeeperCheckpointStore:
        store = open_store(zk_url, "rounds", owner=owner)
        assert isinstance(store, ZooKeeperCheckpointStore)
        opened.append(store)
        return store

    yield make
    for s in opened:
        s.close()


class CallLog:
    """Records, in order, the reads and transaction commits a store's client sends;
    ``before_first_commit`` runs once, just before the first transaction is built (what
    it raised is kept in ``hook_error``, for the test to show, not the store to hide)."""

    def __init__(self, client: KazooClient, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        self.before_first_commit: Callable[[], None] | None = None
        self.hook_error: BaseException | None = None
        get_async, transaction = client.get_async, client.transaction

        def get(path: str, *a: Any, **kw: Any) -> Any:
            self.calls.append("read")
            return get_async(path, *a, **kw)

        def tx() -> Any:
            if self.before_first_commit is not None:
                hook, self.before_first_commit = self.before_first_commit, None
                try:
                    hook()
                except BaseException as exc:
                    self.hook_error = exc
                    raise
            built = transaction()
            commit_async = built.commit_async

            def commit() -> Any:
                self.calls.append("write")
                return commit_async()

            built.commit_async = commit
            return built

        monkeypatch.setattr(client, "get_async", get)
        monkeypatch.setattr(client, "transaction", tx)


def test_a_round_sends_every_read_then_every_write_without_waiting_between(
    stores: Callable[[str], ZooKeeperCheckpointStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores("w1")
    n = 24
    store.save_many([Checkpoint(STREAM, shard(i), "10") for i in range(n)])
    calls = CallLog(store.client, monkeypatch)

    out = store.save_many([Checkpoint(STREAM, shard(i), str(20 + i)) for i in range(n)])

    assert [o.sequence_number for o in out if isinstance(o, Checkpoint)] == [
        str(20 + i) for i in range(n)
    ]
    # Shard by shard, the calls alternated: read, write, read, write...
    assert calls.calls == ["read"] * n + ["write"] * n
    loaded = stores("w2").load(STREAM)
    assert {s: c.sequence_number for s, c in loaded.items()} == {
        shard(i): str(20 + i) for i in range(n)
    }
    assert {c.owner for c in loaded.values()} == {"w1"}
    assert {c.job_name for c in loaded.values()} == {"rounds"}


def test_a_round_that_loses_a_race_to_another_writer_reads_again(
    stores: Callable[[str], ZooKeeperCheckpointStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, other = stores("w1"), stores("w2")
    store.save_many([Checkpoint(STREAM, shard(i), "10") for i in range(3)])  # 3: no node
    calls = CallLog(store.client, monkeypatch)

    def race() -> None:  # after the round read its shards, before it writes them
        other.save(Checkpoint(STREAM, shard(0), "15"))  # behind the round's 30: overwritten
        other.save(Checkpoint(STREAM, shard(1), "90"))  # ahead of the round's 31: kept
        other.save(Checkpoint(STREAM, shard(3), "5"))  # created first: the round's fails

    calls.before_first_commit = race
    out = store.save_many([Checkpoint(STREAM, shard(i), str(30 + i)) for i in range(4)])

    assert calls.hook_error is None
    assert calls.calls[:5] == ["read"] * 4 + ["write"]  # the round's own path ran
    assert isinstance(out[0], Checkpoint) and out[0].sequence_number == "30"
    assert isinstance(out[1], StaleCheckpointError) and "backwards" in str(out[1])
    assert isinstance(out[2], Checkpoint) and out[2].sequence_number == "32"
    assert isinstance(out[3], Checkpoint) and out[3].sequence_number == "33"
    loaded = stores("w3").load(STREAM)
    assert [loaded[shard(i)].sequence_number for i in range(4)] == ["30", "90", "32", "33"]


def test_a_fenced_round_refuses_only_the_shards_whose_lease_is_gone(
    stores: Callable[[str], ZooKeeperCheckpointStore], raw_zk: KazooClient
) -> None:
    store = stores("w1")
    store.save_many([Checkpoint(STREAM, shard(i), "10") for i in range(5)])
    store.require_leases(STREAM)

    def acquire(i: int) -> int:
        path = store.paths.lease(STREAM, shard(i))
        raw_zk.ensure_path(path)
        return int(raw_zk.set(path, b"{}").version)

    for i in range(4):  # shard 4: no lease at all
        store.set_lease(STREAM, shard(i), acquire(i))
    acquire(1)  # another worker took shard 1
    acquire(3)  # and shard 3, whose checkpoint this round leaves equal

    out = store.save_many(
        [Checkpoint(STREAM, shard(i), "10" if i == 3 else "11") for i in range(5)]
    )

    assert isinstance(out[0], Checkpoint) and out[0].sequence_number == "11"
    assert isinstance(out[1], StaleCheckpointError) and "taken over" in str(out[1])
    assert isinstance(out[2], Checkpoint) and out[2].sequence_number == "11"
    assert isinstance(out[3], StaleCheckpointError) and "taken over" in str(out[3])
    assert isinstance(out[4], StaleCheckpointError) and "holds no lease" in str(out[4])
    loaded = stores("w2").load(STREAM)
    assert [loaded[shard(i)].sequence_number for i in range(5)] == ["11", "10", "11", "10", "10"]


def test_a_shard_listed_twice_in_a_round_is_saved_in_order(
    stores: Callable[[str], ZooKeeperCheckpointStore],
) -> None:
    store = stores("w1")
    store.save(Checkpoint(STREAM, shard(0), "10"))
    out = store.save_many(
        [
            Checkpoint(STREAM, shard(0), "10"),  # equal: a no-op
            Checkpoint(STREAM, shard(1), "7"),
            Checkpoint(STREAM, shard(0), "20"),
            Checkpoint(STREAM, shard(0), "15"),  # behind the 20 just saved
        ]
    )
    assert [o.sequence_number if isinstance(o, Checkpoint) else "stale" for o in out] == [
        "10",
        "7",
        "20",
        "stale",
    ]
    assert stores("w2").load(STREAM)[shard(0)].sequence_number == "20"


def test_a_corrupt_node_stops_the_round_where_shard_by_shard_saving_would_have(
    stores: Callable[[str], ZooKeeperCheckpointStore], raw_zk: KazooClient
) -> None:
    store = stores("w1")
    store.save_many([Checkpoint(STREAM, shard(i), "10") for i in range(4)])
    raw_zk.set(store.paths.checkpoint(STREAM, shard(2)), b"\x00garbage{")

    with pytest.raises(CorruptCheckpointError, match=shard(2)):
        store.save_many([Checkpoint(STREAM, shard(i), "11") for i in range(4)])

    values = {}
    for i in (0, 1, 3):
        data, _ = raw_zk.get(store.paths.checkpoint(STREAM, shard(i)))
        values[i] = json.loads(data)["sequence"]
    assert values == {0: "11", 1: "11", 3: "10"}  # the shards before it saved, not after


def test_a_store_closed_during_a_round_sends_no_write(
    stores: Callable[[str], ZooKeeperCheckpointStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores("w1")
    store.save_many([Checkpoint(STREAM, shard(i), "10") for i in range(3)])
    calls = CallLog(store.client, monkeypatch)
    calls.before_first_commit = store.close  # another thread closes it

    with pytest.raises(CheckpointError, match="closed"):
        store.save_many([Checkpoint(STREAM, shard(i), "11") for i in range(3)])

    assert calls.hook_error is None and "write" not in calls.calls
    loaded = stores("w2").load(STREAM)
    assert [loaded[shard(i)].sequence_number for i in range(3)] == ["10", "10", "10"]


def test_a_round_keeps_an_operators_reset_made_after_the_reader_loaded(
    stores: Callable[[str], ZooKeeperCheckpointStore],
) -> None:
    store = stores("w1")
    store.save_many([Checkpoint(STREAM, shard(i), "50") for i in range(3)])
    store.load(STREAM)
    stores("operator").reset(STREAM, shard(1), Checkpoint(STREAM, shard(1), "20"))

    out = store.save_many([Checkpoint(STREAM, shard(i), "60") for i in range(3)])

    assert isinstance(out[1], StaleCheckpointError) and "reset by an operator" in str(out[1])
    assert isinstance(out[0], Checkpoint) and isinstance(out[2], Checkpoint)
    loaded = stores("w2").load(STREAM)
    assert [loaded[shard(i)].sequence_number for i in range(3)] == ["60", "20", "60"]
