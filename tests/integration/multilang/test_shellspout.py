"""``python -m kinesis_spout.multilang`` driven over pipes, byte for byte, as Storm's
ShellSpout drives it, against the moto server.

Every read has a deadline (the harness raises ChildTimeout), so a child that
hangs fails the test in seconds.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kinesis_spout.checkpoint import open_store
from kinesis_spout.deadletter import read_dead_letters
from kinesis_spout.multilang.adapter import OUTPUT_FIELDS, decode_data
from kinesis_spout.multilang.protocol import frame
from kinesis_spout.multilang.testing import ShellSpoutParent
from kinesis_spout.records import Checkpoint
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client, put_records

pytestmark = pytest.mark.integration

Spawn = Callable[..., ShellSpoutParent]
WriteConfig = Callable[..., Path]
RECORDS = 24
STORM_CONF = {"topology.message.timeout.secs": 30}


@dataclass
class Job:
    """A stream with records in it and a config file that reads it."""

    stream: str
    config: Path
    checkpoints: Path
    dead_letters: Path
    puts: list[tuple[str, str]]
    """``(shard_id, sequence)`` per record, in put order."""
    payloads: list[bytes]

    def message_ids(self) -> set[str]:
        return {f"{shard}:{seq}" for shard, seq in self.puts}

    def stored(self) -> dict[str, Checkpoint]:
        store = open_store(f"file://{self.checkpoints}", self.stream)
        try:
            return store.load(self.stream)
        finally:
            store.close()

    def stored_sequences(self) -> dict[str, str | None]:
        return {s: cp.sequence_number for s, cp in self.stored().items()}

    def last_sequence_per_shard(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for shard, seq in self.puts:
            if shard not in out or int(seq) > int(out[shard]):
                out[shard] = seq
        return out


@pytest.fixture
def job(
    moto_server: MotoServer, unique_name: str, tmp_path: Path, write_config: WriteConfig
) -> Job:
    client = emulator_client(moto_server.endpoint_url)
    create_stream(client, unique_name, shards=2)
    payloads = [f"record-{i}".encode() for i in range(RECORDS - 2)]
    payloads += ["caf\u00e9 \u2603".encode(), b"\xff\xfe\x00binary"]
    puts = put_records(client, unique_name, [(f"pk-{i}", p) for i, p in enumerate(payloads)])
    config = write_config(tmp_path / "job.toml", unique_name, moto_server.endpoint_url, tmp_path)
    return Job(unique_name, config, tmp_path / "checkpoints", tmp_path / "dead", puts, payloads)


def fields(emit: dict[str, Any]) -> dict[str, Any]:
    return dict(zip(OUTPUT_FIELDS, emit["tuple"], strict=True))


# --- the happy path ---------------------------------------------------------------------


def test_handshake_pid_file_and_clean_exit(job: Job, spawn: Spawn, pid_dir: Path) -> None:
    child = spawn(job.config)
    pid = child.handshake(pid_dir, STORM_CONF)
    assert pid == child.pid
    assert (pid_dir / str(pid)).is_file()
    child.close_stdin()
    assert child.wait() == 0
    assert bytes(child.raw_out) == frame({"pid": pid})  # nothing else on stdout


def test_every_record_emitted_once_and_acks_advance_the_checkpoint(
    job: Job, spawn: Spawn, pid_dir: Path
) -> None:
    child = spawn(job.config)
    child.handshake(pid_dir, STORM_CONF)
    emits = child.next_until(RECORDS)
    ids = [e["id"] for e in emits]
    assert Counter(ids).most_common(1)[0][1] == 1
    assert set(ids) == job.message_ids()
    assert child.task_id_replies == RECORDS  # one task-id list read per emit
    by_id = {f"{s}:{q}": p for (s, q), p in zip(job.puts, job.payloads, strict=True)}
    for e in emits:
        f = fields(e)
        assert e["stream"] == "default"
        assert decode_data(f["data"], f["encoding"]) == by_id[e["id"]]
        assert e["id"] == f"{f['shard_id']}:{f['sequence_number']}"
        assert f["attempt"] == 1 and isinstance(f["approximate_arrival_ms"], int)
    encodings = {fields(e)["encoding"] for e in emits}
    assert encodings == {"utf-8", "base64"}

    # Storm deactivates the spout (no more nexts) and acks the first half of each shard:
    # the checkpoint still follows, written on the commands that do arrive.
    per_shard: dict[str, list[str]] = {}
    for e in emits:
        per_shard.setdefault(fields(e)["shard_id"], []).append(e["id"])
    half = {s: mids[: len(mids) // 2] for s, mids in per_shard.items()}
    child.deactivate()
    for mids in half.values():
        for mid in mids:
            assert child.ack(mid).errors == []
    time.sleep(0.3)  # > checkpoint_interval
    child.activate()
    expected_half = {s: mids[-1].split(":")[1] for s, mids in half.items() if mids}
    assert job.stored_sequences() == expected_half

    for mids in per_shard.values():
        for mid in mids[len(mids) // 2 :]:
            child.ack(mid)
    assert child.next().emits == []  # nothing more to read, nothing to retry
    child.close_stdin()
    assert child.wait() == 0
    assert job.stored_sequences() == job.last_sequence_per_shard()


def test_fails_retry_up_to_the_limit_then_dead_letter(
    job: Job, spawn: Spawn, pid_dir: Path
) -> None:
    child = spawn(job.config)
    child.handshake(pid_dir, STORM_CONF)
    emits = child.next_until(RECORDS)
    victim = emits[3]["id"]
    for e in emits:
        if e["id"] != victim:
            child.ack(e["id"])
    attempts = [1]
    child.fail(victim)
    # retry_limit = 2: two more deliveries, each failed; then it is given up
    for expected_attempt in (2, 3):
        (again,) = child.next_until(1)
        assert again["id"] == victim
        assert fields(again)["attempt"] == expected_attempt
        attempts.append(expected_attempt)
        child.fail(victim)
    for _ in range(5):
        assert child.next().emits == []
    child.close_stdin()
    assert child.wait() == 0
    assert attempts == [1, 2, 3]
    dead = read_dead_letters(job.dead_letters)
    assert [d["message_id"] for d in dead] == [victim]
    assert dead[0]["attempts"] == 3
    assert "Storm topology" in dead[0]["error"]
    # the given-up record no longer holds its shard back
    assert job.stored_sequences() == job.last_sequence_per_shard()


def test_restart_replays_only_what_was_not_acked(job: Job, spawn: Spawn, pid_dir: Path) -> None:
    first = spawn(job.config)
    first.handshake(pid_dir, STORM_CONF)
    emits = first.next_until(RECORDS)
    acked = {e["id"] for i, e in enumerate(emits) if i % 3 != 1}  # leave gaps
    for mid in acked:
        first.ack(mid)
    first.close_stdin()
    assert first.wait() == 0

    second = spawn(job.config)
    second.handshake(pid_dir, STORM_CONF)
    replay: list[dict[str, Any]] = []
    for _ in range(20):
        replay += second.next().emits
    replayed = {e["id"] for e in replay}
    unacked = job.message_ids() - acked
    assert unacked <= replayed  # nothing lost
    # at most what was in flight after each shard's first gap comes back
    for e in replay:
        if e["id"] in acked:
            shard, seq = e["id"].split(":")
            first_gap = min(int(m.split(":")[1]) for m in unacked if m.startswith(shard + ":"))
            assert int(seq) > first_gap
    for e in replay:
        second.ack(e["id"])
    second.close_stdin()
    assert second.wait() == 0
    assert job.stored_sequences() == job.last_sequence_per_shard()


def test_need_task_ids_false_and_storm_conf_options(job: Job, spawn: Spawn, pid_dir: Path) -> None:
    child = spawn(job.config, "--no-need-task-ids")
    conf = {
        **STORM_CONF,
        "topology.max.spout.pending": 5,
        "kinesis.spout.multilang.output_stream": "records",
        "kinesis.spout.multilang.data_encoding": "base64",
    }
    child.handshake(pid_dir, conf)
    sizes = []
    emits: list[dict[str, Any]] = []
    while len(emits) < RECORDS:
        reply = child.next()
        sizes.append(len(reply.emits))
        emits += reply.emits
    assert child.task_id_replies == 0
    assert max(sizes) <= 5
    assert all(e["need_task_ids"] is False and e["stream"] == "records" for e in emits)
    assert {fields(e)["encoding"] for e in emits} == {"base64"}
    child.close_stdin()
    assert child.wait() == 0


def test_activate_deactivate(job: Job, spawn: Spawn, pid_dir: Path) -> None:
    child = spawn(job.config)
    child.handshake(pid_dir, STORM_CONF)
    first = child.deactivate()  # the startup log lines arrive with the first reply
    assert first.emits == [] and first.errors == []
    assert any("opened stream" in m["msg"] for m in first.logs)
    assert all(child.next().emits == [] for _ in range(5))
    child.activate()
    assert len(child.next_until(RECORDS)) == RECORDS
    child.close_stdin()
    assert child.wait() == 0


def test_sigterm_checkpoints_and_exits(job: Job, spawn: Spawn, pid_dir: Path) -> None:
    child = spawn(job.config)
    child.handshake(pid_dir, STORM_CONF)
    for e in child.next_until(RECORDS):
        child.ack(e["id"])
    assert child.proc is not None
    child.proc.send_signal(signal.SIGTERM)  # waiting for the next command
    assert child.wait() == 0
    assert job.stored_sequences() == job.last_sequence_per_shard()


# --- bad input: an error message, then a clean exit, never a hang ----------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"command": next}\nend\n', "not valid JSON"),
        (frame({"command": "dance"}), "unknown command 'dance'"),
        (frame({"command": "ack"}), "ack without a message id"),
        (frame(["not", "a", "command"]), "expected a command object"),
    ],
    ids=["bad-json", "unknown-command", "ack-without-id", "list"],
)
def test_malformed_command_error_then_exit_2(
    job: Job, spawn: Spawn, pid_dir: Path, raw: bytes, expected: str
) -> None:
    child = spawn(job.config)
    child.handshake(pid_dir, STORM_CONF)
    first = child.next_until(1)
    child.ack(first[0]["id"])
    child.send_raw(raw)
    assert expected in child.read_error()
    assert child.wait() == 2
    # what was acked before the bad input is checkpointed on the way out
    shard, seq = first[0]["id"].split(":")
    assert job.stored_sequences().get(shard) == seq


def test_input_ending_inside_a_message(job: Job, spawn: Spawn, pid_dir: Path) -> None:
    child = spawn(job.config)
    child.handshake(pid_dir, STORM_CONF)
    child.send_raw(b'{"command": "next"}\n')  # no "end" line, then EOF
    child.close_stdin()
    assert "input ended inside message" in child.read_error()
    assert child.wait() == 2


def test_wrong_task_id_reply_is_fatal(job: Job, spawn: Spawn, pid_dir: Path) -> None:
    child = spawn(job.config, "--emits-per-next", "1")
    child.handshake(pid_dir, STORM_CONF)
    child.send({"command": "next"})
    deadline = time.monotonic() + 10
    while True:  # idle nexts until the first emit arrives
        m = child.read()
        if m.get("command") == "emit":
            break
        assert time.monotonic() < deadline
        if m.get("command") == "sync":
            child.send({"command": "next"})
    child.send({"command": "next"})  # where the task ids belong
    assert "task ids" in child.read_error()
    assert child.wait() == 2


def test_unknown_id_is_logged_and_the_conversation_goes_on(
    job: Job, spawn: Spawn, pid_dir: Path
) -> None:
    child = spawn(job.config)
    child.handshake(pid_dir, STORM_CONF)
    reply = child.ack("shardId-000000000042:12345")
    assert reply.errors == []
    assert any("shardId-000000000042:12345" in m["msg"] for m in reply.logs)
    reply = child.fail("no-such-id")
    assert any("no-such-id" in m["msg"] for m in reply.logs)
    assert len(child.next_until(RECORDS)) == RECORDS
    child.close_stdin()
    assert child.wait() == 0


def test_bad_handshake_error_and_exit(spawn: Spawn, tmp_path: Path) -> None:
    config = tmp_path / "job.toml"
    config.write_text('stream_name = "never-read"\n')
    child = spawn(config)
    child.send({"conf": {}, "pidDir": str(tmp_path / "missing" / "dir"), "context": {}})
    assert "cannot create the pid file" in child.read_error()
    assert child.wait() == 2


def test_unknown_stream_error_names_it(
    moto_server: MotoServer, spawn: Spawn, pid_dir: Path, tmp_path: Path, write_config: WriteConfig
) -> None:
    config = write_config(tmp_path / "j.toml", "no-such-stream", moto_server.endpoint_url, tmp_path)
    child = spawn(config)
    child.handshake(pid_dir, STORM_CONF)
    assert "no-such-stream" in child.read_error()
    assert child.wait() == 1


def test_bad_storm_conf_value_error_names_the_key(job: Job, spawn: Spawn, pid_dir: Path) -> None:
    child = spawn(job.config)
    child.handshake(pid_dir, {"kinesis.spout.retry_limt": 3})
    assert "kinesis.spout.retry_limt" in child.read_error()
    assert child.wait() == 2


def test_stdout_is_reserved_for_the_protocol(tmp_path: Path) -> None:
    code = (
        "import os, subprocess\n"
        "from kinesis_spout.multilang.main import _claim_stdout\n"
        "out = _claim_stdout()\n"
        "print('stray print')\n"
        "os.write(1, b'stray fd write\\n')\n"
        "subprocess.run(['echo', 'stray child'], check=True)\n"
        "out.write(b'PROTOCOL'); out.flush()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30, check=True)
    assert done.stdout == b"PROTOCOL"
    for stray in (b"stray print", b"stray fd write", b"stray child"):
        assert stray in done.stderr
