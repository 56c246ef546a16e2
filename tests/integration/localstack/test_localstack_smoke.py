"""The reader smoke subset against LocalStack in host mode: the init hook, the
pre-installed engine, and the spout reading, acking, failing, checkpointing
and resuming."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kit import spout_config

from devkit.localstack import (
    LOCALSTACK_KINESIS_MOCK_VERSION,
    LocalStackServer,
    descendants,
)
from kinesis_spout.checkpoint import open_store
from kinesis_spout.config import SpoutConfig
from kinesis_spout.deadletter import read_dead_letters
from kinesis_spout.records import Record
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.streams import create_stream, emulator_client, make_payloads, put_records

pytestmark = pytest.mark.integration


def test_init_hook_created_the_demo_streams(localstack: LocalStackServer) -> None:
    assert localstack.init_scripts() == [
        {"stage": "READY", "name": "create-streams.py", "state": "SUCCESSFUL"}
    ]
    client = emulator_client(localstack.endpoint_url)
    for name, shards in (("demo", 2), ("demo-single", 1)):
        summary = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        assert summary["StreamStatus"] == "ACTIVE"
        assert summary["OpenShardCount"] == shards


def test_kinesis_engine_is_the_preinstalled_one(localstack: LocalStackServer) -> None:
    """LocalStack never downloaded its engine: the node process it runs is the
    pre-seeded kinesis-local, reached through the link the launcher made."""
    seeded = (
        localstack.filesystem_root
        / "var/lib/localstack/lib/kinesis-local"
        / LOCALSTACK_KINESIS_MOCK_VERSION
    )
    assert seeded.is_symlink()
    assert localstack.proc is not None
    cmdlines = []
    for pid in descendants(localstack.proc.pid):
        try:
            cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" "))
        except OSError:
            continue
    engine = [c for c in cmdlines if b"kinesis-local" in c]
    assert engine, cmdlines
    assert str(seeded).encode() in engine[0]


def _config(localstack: LocalStackServer, stream: str, tmp_path: Path) -> SpoutConfig:
    return spout_config(
        under=tmp_path,
        stream_name=stream,
        job_name=stream,
        endpoint_url=localstack.endpoint_url,
        dead_letter=str(tmp_path / "dead"),
        retry_limit=1,
        max_calls_per_second=50.0,
        checkpoint_interval=0.5,
    )


def _read(spout: KinesisSpout, count: int, timeout: float = 30.0) -> list[Record]:
    out: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        assert time.monotonic() < deadline, f"read {len(out)} of {count}"
        batch = spout.next_batch(count - len(out))
        out += batch
        if not batch:
            time.sleep(min(spout.poll_delay(), 0.05))
    return out


def test_spout_reads_acks_checkpoints_and_resumes(
    localstack: LocalStackServer, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(localstack.endpoint_url)
    create_stream(client, unique_name, shards=2)
    puts = put_records(client, unique_name, make_payloads(40, size=64))
    last: dict[str, str] = {}
    for shard, seq in puts:
        last[shard] = max(last.get(shard, seq), seq, key=int)
    config = _config(localstack, unique_name, tmp_path)

    first = KinesisSpout(config)
    first.open()
    records = _read(first, 40)
    assert {(r.shard_id, r.sequence_number) for r in records} == set(puts)
    poison = records[5]
    kept_back = {r.message_id for r in records[30:]}  # in flight when the first spout stops
    for r in records:
        if r is not poison and r.message_id not in kept_back:
            first.ack(r)
    first.fail(poison, "boom")
    (retry,) = _read(first, 1)
    assert retry.message_id == poison.message_id and retry.attempt == 2
    first.fail(retry, "boom again")  # retry_limit = 1: given up, dead-lettered
    first.close()
    assert [d["message_id"] for d in read_dead_letters(tmp_path / "dead")] == [poison.message_id]

    second = KinesisSpout(config)
    second.open()
    replay = _read(second, len(kept_back))
    for _ in range(10):  # nothing else comes back
        assert second.next_batch(100) == []
        time.sleep(0.05)
    assert {r.message_id for r in replay} == kept_back
    for r in replay:
        second.ack(r)
    second.close()
    store = open_store(config.checkpoint_store, config.job_name)
    try:
        stored = {s: cp.sequence_number for s, cp in store.load(unique_name).items()}
    finally:
        store.close()
    assert stored == last
