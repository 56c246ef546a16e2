"""``python -m kinesis_spout.multilang`` reading two streams, driven over pipes as Storm's
ShellSpout drives it, against the moto server.

Both streams have a ``shardId-000000000000``: an id or a checkpoint that did not name its
stream would mix them up.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kinesis_spout.checkpoint import open_store
from kinesis_spout.deadletter import read_dead_letters
from kinesis_spout.multilang.adapter import output_fields
from kinesis_spout.multilang.testing import ShellSpoutParent
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client, put_records

pytestmark = pytest.mark.integration

Spawn = Callable[..., ShellSpoutParent]
WriteConfig = Callable[..., Path]
PER_STREAM = 12
STORM_CONF = {"topology.message.timeout.secs": 30}


@dataclass
class Put:
    """One record put in one of the streams."""

    stream: str
    shard: str
    sequence: str
    partition_key: str
    text: str

    @property
    def message_id(self) -> str:
        return f"{self.stream}/{self.shard}:{self.sequence}"


@dataclass
class TwoStreams:
    """Two streams with records in them and a config file reading both."""

    streams: tuple[str, str]
    config: Path
    checkpoints: Path
    dead_letters: Path
    puts: list[Put]

    def by_id(self) -> dict[str, Put]:
        return {p.message_id: p for p in self.puts}

    def stored_sequences(self) -> dict[str, dict[str, str | None]]:
        """Each stream's stored checkpoints: shard id -> sequence."""
        store = open_store(f"file://{self.checkpoints}", self.streams[0])
        try:
            return {
                s: {shard: cp.sequence_number for shard, cp in store.load(s).items()}
                for s in self.streams
            }
        finally:
            store.close()

    def last_sequences(self, puts: list[Put] | None = None) -> dict[str, dict[str, str]]:
        """The highest sequence per stream and shard of ``puts`` (default: all)."""
        out: dict[str, dict[str, str]] = {s: {} for s in self.streams}
        for p in self.puts if puts is None else puts:
            shards = out[p.stream]
            shards[p.shard] = max(shards.get(p.shard, p.sequence), p.sequence, key=int)
        return out


@pytest.fixture
def two(
    moto_server: MotoServer, unique_name: str, tmp_path: Path, write_config: WriteConfig
) -> TwoStreams:
    client = emulator_client(moto_server.endpoint_url)
    streams = (f"{unique_name}-a", f"{unique_name}-b")
    puts: list[Put] = []
    for stream in streams:
        create_stream(client, stream, shards=2)
        items = [(f"pk-{i}", f"{stream[-1]}-{i}") for i in range(PER_STREAM)]
        done = put_records(client, stream, [(k, t.encode()) for k, t in items])
        puts += [
            Put(stream, shard, seq, k, t) for (shard, seq), (k, t) in zip(done, items, strict=True)
        ]
    assert {p.shard for p in puts if p.stream == streams[0]} & {
        p.shard for p in puts if p.stream == streams[1]
    }, "the streams share no shard id: the test would not tell them apart"
    config = write_config(tmp_path / "job.toml", list(streams), moto_server.endpoint_url, tmp_path)
    return TwoStreams(streams, config, tmp_path / "checkpoints", tmp_path / "dead", puts)


def wait_for_checkpoints(
    child: ShellSpoutParent, two: TwoStreams, expected: dict[str, dict[str, str]]
) -> None:
    """Commands (which offer the checkpoint) until the store holds ``expected``."""
    deadline = time.monotonic() + 15
    while two.stored_sequences() != expected:
        assert time.monotonic() < deadline, (two.stored_sequences(), expected)
        assert child.deactivate().errors == []  # a command: the child offers its checkpoint


def test_every_record_of_both_streams_once_and_acks_move_each_streams_checkpoints(
    two: TwoStreams, spawn: Spawn, pid_dir: Path
) -> None:
    child = spawn(two.config, "--no-need-task-ids")
    child.handshake(pid_dir, STORM_CONF)
    emits = child.next_until(len(two.puts))
    ids = [e["id"] for e in emits]
    assert Counter(ids).most_common(1)[0][1] == 1
    assert set(ids) == set(two.by_id())  # "<stream>/<shardId>:<sequence>", every one
    for e in emits:  # the default layout, the one a one-stream spout emits: no stream field
        put = two.by_id()[e["id"]]
        arrival = e["tuple"][-1]
        assert e["tuple"] == [
            put.text,
            "utf-8",
            put.partition_key,
            put.shard,
            put.sequence,
            0,
            1,
            arrival,
        ]
        assert isinstance(arrival, int)
    assert child.next().emits == []  # nothing more

    # the first half of each stream's shards acked: each stream's checkpoints follow
    per_shard: dict[tuple[str, str], list[Put]] = {}
    for mid in ids:
        put = two.by_id()[mid]
        per_shard.setdefault((put.stream, put.shard), []).append(put)
    half = [p for puts in per_shard.values() for p in puts[: len(puts) // 2]]
    for put in half:
        assert child.ack(put.message_id).errors == []
    expected = two.last_sequences(half)
    wait_for_checkpoints(child, two, expected)
    child.activate()

    for puts in per_shard.values():
        for put in puts[len(puts) // 2 :]:
            child.ack(put.message_id)
    assert child.next().emits == []
    child.close_stdin()
    assert child.wait() == 0
    assert two.stored_sequences() == two.last_sequences()


def test_an_id_without_its_stream_is_unknown(two: TwoStreams, spawn: Spawn, pid_dir: Path) -> None:
    child = spawn(two.config, "--no-need-task-ids")
    child.handshake(pid_dir, STORM_CONF)
    emits = child.next_until(len(two.puts))
    bare = emits[0]["id"].split("/", 1)[1]  # "<shardId>:<sequence>": in both streams
    reply = child.ack(bare)
    assert reply.errors == []
    assert any(bare in m["msg"] and "unknown" in m["msg"] for m in reply.logs)
    for e in emits:
        child.ack(e["id"])
    child.close_stdin()
    assert child.wait() == 0
    assert two.stored_sequences() == two.last_sequences()


def test_a_failed_record_is_retried_then_dead_lettered_naming_its_stream(
    two: TwoStreams, spawn: Spawn, pid_dir: Path
) -> None:
    child = spawn(two.config, "--no-need-task-ids")
    child.handshake(pid_dir, STORM_CONF)
    emits = child.next_until(len(two.puts))
    b = two.streams[1]
    victim = next(e["id"] for e in emits if e["id"].startswith(f"{b}/shardId-000000000000:"))
    for e in emits:
        if e["id"] != victim:
            child.ack(e["id"])
    child.fail(victim)
    for attempt in (2, 3):  # retry_limit = 2
        (again,) = child.next_until(1)
        assert (again["id"], again["tuple"][6]) == (victim, attempt)
        logs = child.fail(victim).logs
    for _ in range(5):
        reply = child.next()
        assert reply.emits == []
        logs += reply.logs
    # the WARNING names the stream: "dead-lettered <stream>/<shardId>:<sequence> ..."
    assert any(f"dead-lettered {victim} " in m["msg"] for m in logs), logs
    child.close_stdin()
    assert child.wait() == 0

    (dead,) = read_dead_letters(two.dead_letters)
    put = two.by_id()[victim]
    assert (dead["stream"], dead["shard_id"], dead["sequence_number"]) == (
        b,
        put.shard,
        put.sequence,
    )
    assert dead["attempts"] == 3 and "Storm topology" in dead["error"]
    assert list(two.dead_letters.rglob("*.jsonl")) == [
        two.dead_letters / two.streams[0] / b / "shardId-000000000000.jsonl"
    ]
    # the given-up record holds neither stream back
    assert two.stored_sequences() == two.last_sequences()


@pytest.mark.parametrize("how", ["flag", "storm-conf"])
def test_include_stream_name_appends_the_records_stream(
    two: TwoStreams, spawn: Spawn, pid_dir: Path, how: str
) -> None:
    conf: dict[str, Any] = dict(STORM_CONF)
    flags = ["--no-need-task-ids"]
    if how == "flag":
        flags.append("--include-stream-name")
    else:
        conf["kinesis.spout.multilang.include_stream_name"] = True
    child = spawn(two.config, *flags)
    child.handshake(pid_dir, conf)
    emits = child.next_until(len(two.puts))
    fields = output_fields(include_stream_name=True)
    for e in emits:
        put = two.by_id()[e["id"]]
        arrival = e["tuple"][7]
        assert e["tuple"] == [
            put.text,
            "utf-8",
            put.partition_key,
            put.shard,
            put.sequence,
            0,
            1,
            arrival,
            put.stream,
        ]
        assert dict(zip(fields, e["tuple"], strict=True))["stream_name"] == put.stream
    assert {e["tuple"][-1] for e in emits} == set(two.streams)
    child.close_stdin()
    assert child.wait() == 0


def test_one_stream_keeps_its_ids_and_tuple(
    moto_server: MotoServer,
    unique_name: str,
    tmp_path: Path,
    write_config: WriteConfig,
    spawn: Spawn,
    pid_dir: Path,
) -> None:
    client = emulator_client(moto_server.endpoint_url)
    create_stream(client, unique_name, shards=1)
    ((shard, seq),) = put_records(client, unique_name, [("pk", b"only")])
    config = write_config(tmp_path / "one.toml", unique_name, moto_server.endpoint_url, tmp_path)
    child = spawn(config, "--no-need-task-ids")
    child.handshake(pid_dir, STORM_CONF)
    (emit,) = child.next_until(1)
    assert emit["id"] == f"{shard}:{seq}"
    assert emit["tuple"] == ["only", "utf-8", "pk", shard, seq, 0, 1, emit["tuple"][7]]
    child.ack(emit["id"])
    child.close_stdin()
    assert child.wait() == 0


def test_a_deleted_stream_is_let_go_and_the_other_read_on(
    two: TwoStreams, spawn: Spawn, pid_dir: Path, moto_server: MotoServer
) -> None:
    child = spawn(two.config, "--no-need-task-ids")
    child.handshake(pid_dir, STORM_CONF)
    for e in child.next_until(len(two.puts)):
        child.ack(e["id"])
    a, b = two.streams
    client = emulator_client(moto_server.endpoint_url)
    client.delete_stream(StreamName=b)
    ((shard, seq),) = put_records(client, a, [("pk", b"after")])
    logs: list[dict[str, Any]] = []
    emits: list[dict[str, Any]] = []
    deadline = time.monotonic() + 15
    while not emits or not any(f"stream {b} " in m["msg"] for m in logs):
        assert time.monotonic() < deadline, (emits, logs)
        reply = child.next()
        assert reply.errors == []
        emits += reply.emits
        logs += reply.logs
    assert [e["id"] for e in emits] == [f"{a}/{shard}:{seq}"]
    assert any("no longer read" in m["msg"] for m in logs if f"stream {b} " in m["msg"])
    child.ack(emits[0]["id"])

    client.delete_stream(StreamName=a)  # no stream left: the child stops, naming them
    deadline = time.monotonic() + 15
    while not (reply := child.next()).errors:
        assert time.monotonic() < deadline
    assert "no stream left to read" in reply.errors[0]["msg"]
    assert child.wait() == 1
