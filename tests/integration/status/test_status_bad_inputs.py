"""``kinesis-spout status`` on bad input, through the real command: a checkpoint
store that is a file, a ZooKeeper that does not answer, a stream that does
not exist: each a clear error naming it, exit 1, no traceback, nothing created. And a
job with no checkpoints yet (its directory not even created): said so, every shard
still listed, exit 0."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.status import run_status, status_json, table_rows
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client, make_payloads, put_records

pytestmark = pytest.mark.integration


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def stream(moto_server: MotoServer, unique_name: str) -> str:
    client = emulator_client(moto_server.endpoint_url)
    create_stream(client, unique_name, 3)
    put_records(client, unique_name, make_payloads(30, 20))
    return unique_name


@pytest.fixture
def silent_zookeeper() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield int(sock.getsockname()[1])
    sock.close()


def common(moto: MotoServer, stream: str, tmp_path: Path) -> list[str]:
    return [
        "--stream-name",
        stream,
        "--job-name",
        "billing",
        "--endpoint-url",
        moto.endpoint_url,
        "--dead-letter",
        str(tmp_path / "dead-letter"),
    ]


def assert_clean_failure(proc: object, *expected: str) -> None:
    code, out, err = proc.returncode, proc.stdout, proc.stderr  # type: ignore[attr-defined]
    assert code == 1, (code, out, err)
    assert out == "" and "Traceback" not in err
    assert err.startswith("kinesis-spout status: error: "), err
    for text in expected:
        assert text in err, err


def test_a_checkpoint_directory_that_does_not_exist_yet_lists_every_shard(
    moto_server: MotoServer, stream: str, tmp_path: Path
) -> None:
    """Issue 26, hole 4: a job that never checkpointed has no store directory yet.
    ``status`` lists every shard with no checkpoint and exits 0 (as ``checkpoints``
    does), saying the directory does not exist yet; it creates nothing."""
    missing = tmp_path / "no-such-dir"
    args = [*common(moto_server, stream, tmp_path), "--checkpoint-store", f"file://{missing}"]
    proc = run_status(*args, "--no-lag")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(table_rows(proc.stdout)) == [f"shardId-{i:012d}" for i in range(3)]
    assert f"directory {missing} does not exist yet" in proc.stdout
    doc = status_json(*args, "--no-lag")
    assert all(s["checkpoint"] is None and s["state"] == "open" for s in doc["shards"])
    assert doc["job_lease"]["state"] == "free"
    assert any("does not exist yet" in n for n in doc["notes"]), doc["notes"]
    assert files(tmp_path) == []  # not the store, not the dead-letter directory


def test_a_checkpoint_store_that_is_a_file(
    moto_server: MotoServer, stream: str, tmp_path: Path
) -> None:
    afile = tmp_path / "a-file"
    afile.write_text("")
    proc = run_status(
        *common(moto_server, stream, tmp_path), "--checkpoint-store", f"file://{afile}"
    )
    assert_clean_failure(proc, f"checkpoint store file://{afile}", f"{afile} is not a directory")


def test_a_zookeeper_that_does_not_answer(
    moto_server: MotoServer, stream: str, tmp_path: Path, silent_zookeeper: int
) -> None:
    url = f"zk://127.0.0.1:{silent_zookeeper}/kinesis-spout"
    proc = run_status(
        *common(moto_server, stream, tmp_path),
        "--checkpoint-store",
        url,
        "--timeout",
        "2",
        timeout=60,
    )
    assert_clean_failure(proc, f"ZooKeeper {url} not reachable within 2s")


def test_a_stream_that_does_not_exist(moto_server: MotoServer, stream: str, tmp_path: Path) -> None:
    store = tmp_path / "checkpoints"
    store.mkdir()
    proc = run_status(
        *common(moto_server, "no-such-stream", tmp_path), "--checkpoint-store", f"file://{store}"
    )
    assert_clean_failure(
        proc, f"stream 'no-such-stream' not found at {moto_server.endpoint_url} (region us-east-1)"
    )
    assert files(tmp_path) == ["checkpoints"]


def test_a_job_with_no_checkpoints_yet_lists_every_shard(
    moto_server: MotoServer, stream: str, tmp_path: Path
) -> None:
    store = tmp_path / "checkpoints"
    store.mkdir()
    args = [*common(moto_server, stream, tmp_path), "--checkpoint-store", f"file://{store}"]
    doc = status_json(*args)
    shards = [f"shardId-{i:012d}" for i in range(3)]
    assert [s["shard_id"] for s in doc["shards"]] == shards
    assert doc["notes"] == [
        "no checkpoints yet for job 'billing' on stream "
        f"{stream!r}: every shard starts at TRIM_HORIZON"
    ]
    assert all(s["checkpoint"] is None and s["state"] == "open" for s in doc["shards"])
    assert sum(s["lag"]["pending"] for s in doc["shards"]) == 3  # 30 records wait in 3 shards
    assert doc["job_lease"]["state"] == "free" and doc["workers"] is None
    assert doc["summary"]["dead_letters"] == 0 and doc["kinesis_calls"] == 2 + 2 * 3
    quick = status_json(*args, "--no-lag")
    assert all(s["lag"] is None for s in quick["shards"]) and quick["kinesis_calls"] == 2
    assert quick["summary"]["pending"] == 0 and quick["summary"]["max_millis_behind_latest"] is None
    proc = run_status(*args)
    assert proc.returncode == 0, proc.stderr
    assert sorted(table_rows(proc.stdout)) == shards
    assert "note: no checkpoints yet for job 'billing'" in proc.stdout
    assert files(tmp_path) == ["checkpoints"]  # nothing created: no job directory, no lock file
