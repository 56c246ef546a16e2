"""Resharding mid-read: parents drained before children, nothing lost, order per key kept.

kinesis-mock closes a split or merged parent and reports its children, so the
lineage rules are tested there. moto never closes a parent (writes keep
landing in it), so on moto the test checks that children wait and nothing is
lost.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from reader_helpers import drive, ids, rid, spout

from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.records import Record, ShardState
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.servers import KinesisMock, MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client, put_records, wait_active

pytestmark = pytest.mark.integration

KEYS = 24


def put_keyed(client: Any, stream: str, n: int, prefix: str) -> list[str]:
    """``n`` records over ``KEYS`` partition keys, ids ``<prefix><i>`` in write order."""
    items = [(f"key-{i % KEYS}", f"{prefix}{i:06d}|k{i % KEYS}".encode()) for i in range(n)]
    put_records(client, stream, items)
    return [f"{prefix}{i:06d}" for i in range(n)]


def key_of(r: Record) -> str:
    return r.data.split(b"|")[1].decode()


def assert_order_per_key(deliveries: list[Record]) -> None:
    """Per partition key, first deliveries come in write order (ids grow)."""
    last: dict[str, str] = {}
    for r in deliveries:
        k, i = key_of(r), rid(r.data)
        assert last.get(k, "") < i, f"key {k}: {i} delivered after {last.get(k)}"
        last[k] = i


def hash_middle(client: Any, stream: str, shard_id: str) -> str:
    shard = next(
        s for s in client.list_shards(StreamName=stream)["Shards"] if s["ShardId"] == shard_id
    )
    lo = int(shard["HashKeyRange"]["StartingHashKey"])
    hi = int(shard["HashKeyRange"]["EndingHashKey"])
    return str((lo + hi) // 2)


def hold_then_release(
    sp: KinesisSpout, held: list[Record], log: list[Record], seconds: float = 1.0
) -> None:
    """Keep reading (acking new records) for a while with ``held`` unacked, then ack them."""
    deadline = time.monotonic() + seconds

    def handle(batch: list[Record]) -> None:
        log.extend(batch)
        sp.ack_many(batch)

    drive(sp, handle, stop=lambda: time.monotonic() > deadline, timeout=seconds + 30)
    sp.ack_many(held)


def test_split_mid_read_on_kinesis_mock(
    kinesis_mock: KinesisMock, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(kinesis_mock.endpoint_url)
    create_stream(client, unique_name, 2)
    before = put_keyed(client, unique_name, 300, "a")
    store = MemoryCheckpointStore("job")
    sp = spout(kinesis_mock.endpoint_url, unique_name, tmp_path, store)
    log: list[Record] = []
    drive(sp, log.extend, stop=lambda: len(log) >= len(before))
    parent = "shardId-000000000000"
    held = [r for r in log if r.shard_id == parent][-10:]
    sp.ack_many(r for r in log if r not in held)

    client.split_shard(
        StreamName=unique_name,
        ShardToSplit=parent,
        NewStartingHashKey=hash_middle(client, unique_name, parent),
    )
    wait_active(client, unique_name)
    after = put_keyed(client, unique_name, 300, "b")

    # Parent records are still in flight: its children must not start.
    hold_then_release(sp, held, log, seconds=1.5)
    children = {s for s, st in sp.shard_states().items() if st is ShardState.WAITING}
    assert len(children) == 2
    assert not [r for r in log if r.shard_id in children]

    def handle(batch: list[Record]) -> None:
        log.extend(batch)
        sp.ack_many(batch)

    drive(sp, handle, stop=lambda: sp.is_idle and len(log) >= 600)
    sp.close()

    assert Counter(ids(log)) == Counter(before + after)
    assert_order_per_key(log)
    states = sp.shard_states()
    assert states[parent] is ShardState.ENDED
    assert all(states[c] is ShardState.OPEN for c in children)
    first_child = min(i for i, r in enumerate(log) if r.shard_id in children)
    assert all(i < first_child for i, r in enumerate(log) if r.shard_id == parent)
    stored = store.load(unique_name)
    assert stored[parent].shard_end
    assert {c for c in children if c in stored} == children


def test_merge_mid_read_on_kinesis_mock(
    kinesis_mock: KinesisMock, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(kinesis_mock.endpoint_url)
    create_stream(client, unique_name, 2)
    before = put_keyed(client, unique_name, 240, "a")
    store = MemoryCheckpointStore("job")
    sp = spout(kinesis_mock.endpoint_url, unique_name, tmp_path, store)
    log: list[Record] = []
    drive(sp, log.extend, stop=lambda: len(log) >= len(before))
    held = [r for r in log if r.shard_id == "shardId-000000000001"][-5:]
    sp.ack_many(r for r in log if r not in held)

    client.merge_shards(
        StreamName=unique_name,
        ShardToMerge="shardId-000000000000",
        AdjacentShardToMerge="shardId-000000000001",
    )
    wait_active(client, unique_name)
    after = put_keyed(client, unique_name, 240, "b")

    hold_then_release(sp, held, log, seconds=1.5)
    child = "shardId-000000000002"
    assert not [r for r in log if r.shard_id == child]
    assert sp.shard_states()[child] in (ShardState.WAITING, ShardState.OPEN)

    def handle(batch: list[Record]) -> None:
        log.extend(batch)
        sp.ack_many(batch)

    drive(sp, handle, stop=lambda: sp.is_idle and len(log) >= 480)
    sp.close()
    assert Counter(ids(log)) == Counter(before + after)
    assert_order_per_key(log)
    states = sp.shard_states()
    assert states["shardId-000000000000"] is ShardState.ENDED
    assert states["shardId-000000000001"] is ShardState.ENDED
    assert states[child] is ShardState.OPEN
    assert {r.shard_id for r in log if rid(r.data).startswith("b")} == {child}


def test_restart_after_a_split_resumes_the_children(
    kinesis_mock: KinesisMock, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(kinesis_mock.endpoint_url)
    create_stream(client, unique_name, 1)
    before = put_keyed(client, unique_name, 100, "a")
    parent = "shardId-000000000000"
    client.split_shard(
        StreamName=unique_name,
        ShardToSplit=parent,
        NewStartingHashKey=hash_middle(client, unique_name, parent),
    )
    wait_active(client, unique_name)
    middle = put_keyed(client, unique_name, 100, "b")
    store = MemoryCheckpointStore("job")
    sp = spout(kinesis_mock.endpoint_url, unique_name, tmp_path, store)
    log: list[Record] = []

    def handle(batch: list[Record]) -> None:
        log.extend(batch)
        sp.ack_many(batch)

    drive(sp, handle, stop=lambda: sp.is_idle and len(log) >= 200)
    sp.close()
    after = put_keyed(client, unique_name, 60, "c")
    sp2 = spout(kinesis_mock.endpoint_url, unique_name, tmp_path, store)
    assert sp2.shard_states()[parent] is ShardState.ENDED
    more: list[Record] = []

    def handle2(batch: list[Record]) -> None:
        more.extend(batch)
        sp2.ack_many(batch)

    drive(sp2, handle2, stop=lambda: sp2.is_idle and len(more) >= 60)
    sp2.close()
    assert Counter(ids(log)) == Counter(before + middle)
    assert Counter(ids(more)) == Counter(after)


def test_split_on_moto_children_wait_and_nothing_is_lost(
    moto_server: MotoServer, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(moto_server.endpoint_url)
    create_stream(client, unique_name, 2)
    before = put_keyed(client, unique_name, 200, "a")
    sp = spout(moto_server.endpoint_url, unique_name, tmp_path)
    log: list[Record] = []

    def handle(batch: list[Record]) -> None:
        log.extend(batch)
        sp.ack_many(batch)

    drive(sp, handle, stop=lambda: len(log) >= 200)
    parent = "shardId-000000000000"
    client.split_shard(
        StreamName=unique_name,
        ShardToSplit=parent,
        NewStartingHashKey=hash_middle(client, unique_name, parent),
    )
    wait_active(client, unique_name)
    after = put_keyed(client, unique_name, 200, "b")
    # Children are found by the periodic ListShards (shard_refresh_interval = 1 s here).
    drive(sp, handle, stop=lambda: sp.is_idle and len(log) >= 400 and len(sp.shard_states()) == 4)
    states = sp.shard_states()
    sp.close()
    assert Counter(ids(log)) == Counter(before + after)
    assert_order_per_key(log)
    # moto never ends the parent, so its children wait (and hold nothing).
    assert states[parent] is ShardState.OPEN
    waiting = [s for s, st in states.items() if st is ShardState.WAITING]
    assert len(waiting) == 2
    by_shard: dict[str, int] = defaultdict(int)
    for r in log:
        by_shard[r.shard_id] += 1
    assert set(by_shard) <= {parent, "shardId-000000000001"}
