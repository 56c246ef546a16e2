"""A spout component with parallelism 2: two ShellSpout children share the shards of
its stream, or of its two streams, through ZooKeeper leases (moto server + a real
ZooKeeper)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kinesis_spout.checkpoint import open_store
from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore
from kinesis_spout.multilang.testing import ShellSpoutParent
from kinesis_spout.testing.servers import MotoServer, ZooKeeperServer
from kinesis_spout.testing.streams import create_stream, emulator_client, put_records

pytestmark = pytest.mark.integration

Spawn = Callable[..., ShellSpoutParent]
WriteConfig = Callable[..., Path]


def context(task: int) -> dict[str, Any]:
    return {
        "task->component": {"1": "kinesis", "2": "kinesis", "3": "bolt", "4": "__acker"},
        "taskid": task,
        "componentid": "kinesis",
    }


def test_two_tasks_share_the_shards(
    moto_server: MotoServer,
    zookeeper: ZooKeeperServer,
    unique_name: str,
    tmp_path: Path,
    spawn: Spawn,
    pid_dir: Path,
) -> None:
    client = emulator_client(moto_server.endpoint_url)
    create_stream(client, unique_name, shards=4)
    zk_url = zookeeper.url(f"/{unique_name}")
    config = tmp_path / "job.toml"
    config.write_text(
        f'stream_name = "{unique_name}"\njob_name = "{unique_name}"\n'
        f'endpoint_url = "{moto_server.endpoint_url}"\ncheckpoint_store = "{zk_url}"\n'
        f'dead_letter = "{tmp_path / "dead"}"\nempty_shard_backoff = 0.05\n'
        "max_calls_per_second = 50.0\ncheckpoint_interval = 0.2\nzk_session_timeout = 4.0\n"
    )
    tasks = [spawn(config, "--no-need-task-ids"), spawn(config, "--no-need-task-ids")]
    for i, task in enumerate(tasks, start=1):
        task.handshake(pid_dir, {"topology.message.timeout.secs": 30}, context(i))

    # Storm's loop runs while the two tasks agree on the leases: every shard held, by both
    shard_ids = [s["ShardId"] for s in client.list_shards(StreamName=unique_name)["Shards"]]
    watcher = ZooKeeperCheckpointStore.from_url(zk_url, unique_name)
    try:
        deadline = time.monotonic() + 30
        while True:
            holders: set[str | None] = set()
            for shard in shard_ids:
                path = watcher.paths.lease_holder(unique_name, shard)
                data = watcher.client.get(path)[0] if watcher.client.exists(path) else None
                holders.add(json.loads(data)["owner"] if data else None)
            if None not in holders and len(holders) == 2:
                break
            assert time.monotonic() < deadline, holders
            for task in tasks:
                reply = task.next()
                assert reply.errors == [] and reply.emits == []
    finally:
        watcher.close()

    puts = put_records(client, unique_name, [(f"pk-{i}", f"r{i}".encode()) for i in range(40)])
    emitted: list[list[str]] = [[], []]
    deadline = time.monotonic() + 20
    while sum(len(e) for e in emitted) < len(puts):
        assert time.monotonic() < deadline, emitted
        for i, task in enumerate(tasks):
            reply = task.next()
            assert reply.errors == []
            for e in reply.emits:
                emitted[i].append(e["id"])
                task.ack(e["id"])
    for _ in range(10):  # nothing more, on either side
        for task in tasks:
            assert task.next().emits == []

    everything = emitted[0] + emitted[1]
    assert sorted(everything) == sorted(f"{s}:{q}" for s, q in puts)  # each exactly once
    shards = [{mid.split(":")[0] for mid in e} for e in emitted]
    assert shards[0] and shards[1] and not shards[0] & shards[1]

    for task in tasks:
        task.close_stdin()
    assert [task.wait() for task in tasks] == [0, 0]
    store = open_store(zk_url, unique_name)
    try:
        stored = {s: cp.sequence_number for s, cp in store.load(unique_name).items()}
    finally:
        store.close()
    last: dict[str, str] = {}
    for shard, seq in puts:
        last[shard] = max(last.get(shard, seq), seq, key=int)
    assert {s: q for s, q in stored.items() if s in last} == last


def test_parallelism_without_zookeeper_is_refused(
    moto_server: MotoServer, unique_name: str, tmp_path: Path, spawn: Spawn, pid_dir: Path
) -> None:
    create_stream(emulator_client(moto_server.endpoint_url), unique_name, shards=1)
    config = tmp_path / "job.toml"
    config.write_text(
        f'stream_name = "{unique_name}"\nendpoint_url = "{moto_server.endpoint_url}"\n'
        f'checkpoint_store = "file://{tmp_path / "cp"}"\n'
    )
    child = spawn(config)
    child.handshake(pid_dir, {}, context(1))
    assert "'kinesis' as 2 tasks" in child.read_error()
    assert child.wait() == 2


def test_two_tasks_share_the_shards_of_two_streams(
    moto_server: MotoServer,
    zookeeper: ZooKeeperServer,
    unique_name: str,
    tmp_path: Path,
    spawn: Spawn,
    pid_dir: Path,
    write_config: WriteConfig,
) -> None:
    client = emulator_client(moto_server.endpoint_url)
    streams = [f"{unique_name}-a", f"{unique_name}-b"]
    for stream in streams:
        create_stream(client, stream, shards=2)
    zk_url = zookeeper.url(f"/{unique_name}")
    config = write_config(
        tmp_path / "job.toml",
        streams,
        moto_server.endpoint_url,
        tmp_path,
        checkpoint_store=zk_url,
        zk_session_timeout=4.0,
    )
    tasks = [spawn(config, "--no-need-task-ids"), spawn(config, "--no-need-task-ids")]
    for i, task in enumerate(tasks, start=1):
        task.handshake(pid_dir, {"topology.message.timeout.secs": 30}, context(i))

    # Storm's loop runs while the two tasks agree on the leases of both streams' shards
    shards = [
        (stream, s["ShardId"])
        for stream in streams
        for s in client.list_shards(StreamName=stream)["Shards"]
    ]
    watcher = ZooKeeperCheckpointStore.from_url(zk_url, streams[0])
    try:
        deadline = time.monotonic() + 30
        while True:
            holders: list[str | None] = []
            for stream, shard in shards:
                path = watcher.paths.lease_holder(stream, shard)
                data = watcher.client.get(path)[0] if watcher.client.exists(path) else None
                holders.append(json.loads(data)["owner"] if data else None)
            if None not in holders and len(set(holders)) == 2:
                break
            assert time.monotonic() < deadline, holders
            for task in tasks:
                reply = task.next()
                assert reply.errors == [] and reply.emits == []
    finally:
        watcher.close()

    puts = {
        stream: put_records(client, stream, [(f"pk-{i}", f"r{i}".encode()) for i in range(20)])
        for stream in streams
    }
    expected = sorted(f"{stream}/{s}:{q}" for stream, done in puts.items() for s, q in done)
    emitted: list[list[str]] = [[], []]
    deadline = time.monotonic() + 20
    while sum(len(e) for e in emitted) < len(expected):
        assert time.monotonic() < deadline, emitted
        for i, task in enumerate(tasks):
            reply = task.next()
            assert reply.errors == []
            for e in reply.emits:
                emitted[i].append(e["id"])
                task.ack(e["id"])
    for _ in range(10):  # nothing more, on either side
        for task in tasks:
            assert task.next().emits == []

    assert sorted(emitted[0] + emitted[1]) == expected  # each exactly once, naming its stream
    owned = [{mid.split(":")[0] for mid in e} for e in emitted]  # "<stream>/<shardId>"
    assert owned[0] and owned[1] and not owned[0] & owned[1]

    for task in tasks:
        task.close_stdin()
    assert [task.wait() for task in tasks] == [0, 0]
    store = open_store(zk_url, streams[0])
    try:
        for stream, done in puts.items():
            stored = {s: cp.sequence_number for s, cp in store.load(stream).items()}
            last: dict[str, str] = {}
            for shard, seq in done:
                last[shard] = max(last.get(shard, seq), seq, key=int)
            assert {s: q for s, q in stored.items() if s in last} == last, stream
    finally:
        store.close()
