"""``kinesis-spout dead-letters redrive`` (issue 26, holes 1 and 5), on the moto server
(Kinesis and S3): ``--delete`` never loses an entry a running reader writes, in a
directory or in S3; a re-drive run again after failing half-way puts no entry twice;
a bad stream is a one-line error; no botocore INFO lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from kit import spout_config

from kinesis_spout.cli import main
from kinesis_spout.deadletter import DeadLetter, JsonlDeadLetterSink, read_dead_letters
from kinesis_spout.deadletter.cli import load_sources
from kinesis_spout.deadletter.s3 import S3DeadLetterSink
from kinesis_spout.records import Record
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client
from tracker import SequenceKey

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SHARD = "shardId-000000000000"
BUCKET = "redrive-dead-letters"


def objects(client: Any) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for obj in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        body = client.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read().decode()
        out[obj["Key"]] = [json.loads(line) for line in body.splitlines()]
    return out


@pytest.fixture
def s3_env(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_server.endpoint_url)
    client = boto3.client("s3", endpoint_url=moto_server.endpoint_url, region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    yield client
    for key in list(objects(client)):
        client.delete_object(Bucket=BUCKET, Key=key)
    client.delete_bucket(Bucket=BUCKET)


def letter(stream: str, seq: int, reason: str = "exhausted") -> DeadLetter:
    r = Record(
        stream, SHARD, str(seq), 0, f"pk{seq}", f"poison {seq}".encode(), None, SequenceKey(seq, 0)
    )
    return DeadLetter(r, "boom", 4, reason)


def stream_payloads(client: Any, stream: str) -> list[bytes]:
    out: list[bytes] = []
    for shard in client.list_shards(StreamName=stream)["Shards"]:
        it = client.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        out += [r["Data"] for r in client.get_records(ShardIterator=it, Limit=1000)["Records"]]
    return sorted(out)


def flags(moto: MotoServer, stream: str, dead: str) -> list[str]:
    return [
        "--stream-name",
        stream,
        "--job-name",
        "job",
        "--endpoint-url",
        moto.endpoint_url,
        "--dead-letter",
        dead,
    ]


def test_delete_while_a_reader_writes_loses_nothing(
    moto_server: MotoServer, unique_name: str, tmp_path: Path
) -> None:
    """Hole 1: the issue's run. A reader's sink keeps the shard's file open; 10 dead
    letters are re-driven and deleted; then the reader dead-letters 6 more: all 6 are
    in the file (the old code appended them to the replaced copy: an empty directory)."""
    kinesis = emulator_client(moto_server.endpoint_url)
    create_stream(kinesis, unique_name, 1)
    dead = tmp_path / "dead"
    sink = JsonlDeadLetterSink(dead, "job")  # what a running spout holds
    sink.write_many([letter(unique_name, s) for s in range(1, 11)])
    assert (
        main(["dead-letters", "redrive", "--delete", *flags(moto_server, unique_name, str(dead))])
        == 0
    )
    assert len(stream_payloads(kinesis, unique_name)) == 10
    sink.write_many([letter(unique_name, s) for s in range(11, 17)])
    sink.close()
    left = read_dead_letters(dead)
    assert sorted(int(e["sequence_number"]) for e in left) == list(range(11, 17))


def test_s3_delete_never_overwrites_an_object_a_writer_may_write_again(
    moto_server: MotoServer, unique_name: str, s3_env: Any
) -> None:
    """Hole 1, S3: an object with one exhausted and one expired entry; only the exhausted
    one is re-driven and deleted. A restarted reader then replays the exhausted record
    and writes its object key again: the expired entry must survive (the old code
    rewrote the object in place, and the replay overwrote it)."""
    kinesis = emulator_client(moto_server.endpoint_url)
    create_stream(kinesis, unique_name, 1)
    target = f"s3://{BUCKET}/dl"
    S3DeadLetterSink(target, "job").write_many(
        [letter(unique_name, 5), letter(unique_name, 6, "expired")]
    )
    args = [
        "dead-letters",
        "redrive",
        "--delete",
        "--reason",
        "exhausted",
        *flags(moto_server, unique_name, target),
    ]
    assert main(args) == 0
    replay = S3DeadLetterSink(target, "job")  # a restart, before the checkpoint passed 5
    replay.write_many([letter(unique_name, 5), letter(unique_name, 7)])
    entries = [e for es in objects(s3_env).values() for e in es if "reason" in e]
    assert sorted((int(e["sequence_number"]), e["reason"]) for e in entries) == [
        (5, "exhausted"),
        (6, "expired"),
        (7, "exhausted"),
    ]


def test_a_redrive_that_failed_half_way_puts_no_entry_twice(
    moto_server: MotoServer, unique_name: str, tmp_path: Path
) -> None:
    """Hole 5: batches of 4; the target stream goes away after the first batch (deleted
    by the progress callback: a real failure of the next PutRecords). Run again on the
    stream made anew: only the 6 entries left are put; a third run puts none."""
    kinesis = emulator_client(moto_server.endpoint_url)
    create_stream(kinesis, unique_name, 1)
    dead = tmp_path / "dead"
    sink = JsonlDeadLetterSink(dead, "job")
    sink.write_many([letter(unique_name, s) for s in range(1, 11)])
    cfg = spout_config(
        stream_name=unique_name, dead_letter=str(dead), endpoint_url=moto_server.endpoint_url
    )

    from kinesis_spout.deadletter.cli import redrive

    def go(progress: Any = None) -> int:
        sources = load_sources(cfg)
        entries = [e for s in sources for e in s.entries]
        return redrive(cfg, sources, entries, unique_name, batch=4, progress=progress)

    def delete_stream(done: int, total: int) -> None:
        kinesis.delete_stream(StreamName=unique_name)

    with pytest.raises(Exception) as err:
        go(delete_stream)
    assert "Traceback" not in str(err.value) and unique_name in str(err.value)
    create_stream(kinesis, unique_name, 1)
    assert go() == 0
    assert stream_payloads(kinesis, unique_name) == sorted(
        f"poison {s}".encode() for s in range(5, 11)
    )
    assert go() == 0
    assert len(stream_payloads(kinesis, unique_name)) == 6


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("kinesis-spout"))
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, env=env)


def test_a_stream_that_does_not_exist_is_one_line_and_no_botocore_info(
    moto_server: MotoServer, unique_name: str, tmp_path: Path
) -> None:
    dead = tmp_path / "dead"
    JsonlDeadLetterSink(dead, "job").write_many([letter(unique_name, 1)])
    proc = run_cli(
        "dead-letters",
        "redrive",
        "--to-stream",
        "nosuch",
        *flags(moto_server, unique_name, str(dead)),
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "'nosuch' not found" in errors[0], proc.stderr
    assert "botocore" not in proc.stderr and "Found credentials" not in proc.stderr
    listed = ["--stream-name", unique_name, "--job-name", "job", "--dead-letter", str(dead)]
    listing = run_cli("dead-letters", "list", *listed)  # list takes no Kinesis flags
    assert listing.returncode == 0 and listing.stderr == "", listing.stderr
