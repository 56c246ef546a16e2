"""Dead letters in S3 on moto's server (Kinesis and S3 in one server).

The sink writes one object per write, exactly one entry per record across
restarts. A bucket that is missing, unreachable or refuses the write holds
the shard's checkpoint below the record (nothing lost), is logged and counted,
and the shard recovers once S3 does.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from kit import spout_config

from kinesis_spout.config import SpoutConfig
from kinesis_spout.deadletter import DeadLetter
from kinesis_spout.deadletter.cli import load_sources
from kinesis_spout.deadletter.s3 import DeadLetterWriteError, S3DeadLetterSink
from kinesis_spout.metrics import InMemoryMetrics
from kinesis_spout.records import Record
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.status.sources_deadletters import count_dead_letters
from kinesis_spout.testing.processes import free_port
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, put_records
from tracker import SequenceKey

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BUCKET = "dead-letters"


def s3(endpoint: str, key: str | None = None, secret: str | None = None) -> Any:
    """An S3 client (credentials: the given ones, else the environment's)."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=key or os.environ.get("AWS_ACCESS_KEY_ID", "test"),
        aws_secret_access_key=secret or os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
    )


def objects(client: Any, bucket: str = BUCKET) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for obj in client.list_objects_v2(Bucket=bucket).get("Contents", []):
        body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode()
        out[obj["Key"]] = [json.loads(line) for line in body.splitlines()]
    return out


def rec(seq: int, shard: str = "shardId-000000000001", sub: int = 0) -> Record:
    return Record(
        "orders", shard, str(seq), sub, f"pk{seq}", b"\x00\xffpayload", None, SequenceKey(seq, sub)
    )


@pytest.fixture
def s3_env(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_server.endpoint_url)
    client = s3(moto_server.endpoint_url)
    client.create_bucket(Bucket=BUCKET)
    yield client
    for key in list(objects(client)):
        client.delete_object(Bucket=BUCKET, Key=key)
    client.delete_bucket(Bucket=BUCKET)


def test_one_object_per_write_with_full_entries_exactly_once_across_restarts(s3_env: Any) -> None:
    sink = S3DeadLetterSink(f"s3://{BUCKET}/dl/", "job-a")
    sink.write_many([DeadLetter(rec(5), "boom", 4), DeadLetter(rec(9, sub=2), "boom", 4)])
    again = S3DeadLetterSink(f"s3://{BUCKET}/dl", "job-a")  # a restart replays 9, adds 12
    replay = [DeadLetter(rec(9, sub=2), "boom", 4), DeadLetter(rec(12), "old", 1, "expired")]
    again.write_many(replay)
    again.write_many([DeadLetter(rec(12), "old", 1, "expired")])  # nothing new: no object
    got = objects(s3_env)
    prefix = "dl/job-a/orders/shardId-000000000001/"
    names = [f"{5:064d}-{0:010d}.jsonl", f"{12:064d}-{0:010d}.jsonl"]
    assert sorted(got) == [prefix + n for n in names]
    entries = [e for key in sorted(got) for e in got[key]]
    assert [(e["sequence_number"], e["sub_sequence_number"], e["reason"]) for e in entries] == [
        ("5", 0, "exhausted"),
        ("9", 2, "exhausted"),
        ("12", 0, "expired"),
    ]
    first = entries[0]
    assert base64.b64decode(first["data_base64"]) == b"\x00\xffpayload"
    assert (first["job"], first["shard_id"], first["stream"]) == (
        "job-a",
        "shardId-000000000001",
        "orders",
    )
    assert (first["attempts"], first["error"], first["partition_key"]) == (4, "boom", "pk5")
    assert {"approximate_arrival", "dead_lettered_at", "message_id"} <= set(first)
    assert (sink.written, again.written, again.objects) == (2, 1, 1)
    # `kinesis-spout status` and `dead-letters list` find them under the same layout.
    assert count_dead_letters(f"s3://{BUCKET}/dl", "job-a", "orders") == (
        {"shardId-000000000001": 3},
        None,
    )
    cfg = spout_config(stream_name="orders", job_name="job-a", dead_letter=f"s3://{BUCKET}/dl")
    assert [(s.name, len(s.entries)) for s in load_sources(cfg)] == [
        (f"s3://{BUCKET}/{prefix}{names[0]}", 2),
        (f"s3://{BUCKET}/{prefix}{names[1]}", 1),
    ]


def test_a_missing_bucket_and_an_unreachable_endpoint_are_named_in_the_error(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_server.endpoint_url)
    with pytest.raises(DeadLetterWriteError, match="s3://no-such-bucket/.*NoSuchBucket"):
        S3DeadLetterSink("s3://no-such-bucket/x", "j").write_many([DeadLetter(rec(1), "e", 1)])
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(DeadLetterWriteError, match="s3://dead-letters/.*EndpointConnectionError"):
        S3DeadLetterSink(f"s3://{BUCKET}/x", "j").write_many([DeadLetter(rec(1), "e", 1)])


# ------------------------------------------------------- the spout with a failing bucket


class AuthMoto(MotoServer):
    """A moto server that enforces IAM after its first three requests (the admin's setup)."""

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "INITIAL_NO_AUTH_ACTION_COUNT": "3"}


def allow(iam: Any, user: str, actions: list[str]) -> None:
    doc = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
    }
    iam.put_user_policy(UserName=user, PolicyName="p", PolicyDocument=json.dumps(doc))


def user_keys(iam: Any, user: str, actions: list[str]) -> tuple[str, str]:
    iam.create_user(UserName=user)
    allow(iam, user, actions)
    key = iam.create_access_key(UserName=user)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


Scenario = Callable[[pytest.MonkeyPatch, Path], tuple[str, Callable[[], None]]]


def missing_bucket(mp: pytest.MonkeyPatch, tmp: Path) -> Iterator[tuple[str, Callable[[], None]]]:
    with MotoServer() as server:
        mp.setenv("AWS_ENDPOINT_URL_S3", server.endpoint_url)
        yield server.endpoint_url, lambda: s3(server.endpoint_url).create_bucket(Bucket=BUCKET)


def unreachable(mp: pytest.MonkeyPatch, tmp: Path) -> Iterator[tuple[str, Callable[[], None]]]:
    port = free_port()
    later = MotoServer(port=port)
    with MotoServer() as kinesis:
        mp.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{port}")

        def fix() -> None:
            later.start()
            s3(later.endpoint_url).create_bucket(Bucket=BUCKET)

        try:
            yield kinesis.endpoint_url, fix
        finally:
            later.stop()


def access_denied(mp: pytest.MonkeyPatch, tmp: Path) -> Iterator[tuple[str, Callable[[], None]]]:
    with AuthMoto() as server:
        url = server.endpoint_url
        boot = boto3.client(
            "iam",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        admin = user_keys(boot, "admin", ["*"])  # the 3 unauthenticated requests
        iam = boto3.client(
            "iam",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id=admin[0],
            aws_secret_access_key=admin[1],
        )
        s3(url, *admin).create_bucket(Bucket=BUCKET)
        job = user_keys(iam, "job", ["kinesis:*", "s3:ListBucket", "s3:GetObject"])
        mp.setenv("AWS_ENDPOINT_URL_S3", url)
        mp.setenv("AWS_ACCESS_KEY_ID", job[0])
        mp.setenv("AWS_SECRET_ACCESS_KEY", job[1])
        yield url, lambda: allow(iam, "job", ["kinesis:*", "s3:*"])


@pytest.mark.parametrize("scenario", [missing_bucket, unreachable, access_denied])
def test_a_failing_bucket_holds_the_checkpoint_and_the_shard_recovers_with_s3(
    scenario: Callable[..., Iterator[tuple[str, Callable[[], None]]]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    unique_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    gen = scenario(monkeypatch, tmp_path)
    endpoint, fix = next(gen)
    try:
        kinesis = boto3.session.Session().client(
            "kinesis", endpoint_url=endpoint, region_name="us-east-1"
        )
        create_stream(kinesis, unique_name, 1)
        put = put_records(kinesis, unique_name, [("k", b"ok-1"), ("k", b"POISON"), ("k", b"ok-2")])
        cfg = spout_config(
            under=tmp_path,
            stream_name=unique_name,
            job_name="j",
            endpoint_url=endpoint,
            dead_letter=f"s3://{BUCKET}/dl",
            retry_limit=0,
            message_timeout=0.0,
        )
        metrics = InMemoryMetrics()
        spout = KinesisSpout(cfg, metrics=metrics, client=kinesis)
        spout.open()
        try:
            got: list[Record] = []
            for _ in range(100):
                got += spout.next_batch(10)
                if len(got) == 3:
                    break
            assert [r.data for r in got] == [b"ok-1", b"POISON", b"ok-2"]
            with caplog.at_level(logging.WARNING):
                spout.ack_many([got[0], got[2]])
                spout.fail(got[1], "bad record")
                spout.checkpoint(force=True)
            assert "dead-letter write of" in caplog.text and f"s3://{BUCKET}/dl" in caplog.text
            assert metrics.count("dead_letter_errors") >= 1
            cp = spout.stats()  # the checkpoint is held below the poison record
            shard = put[0][0]
            saved = _saved(cfg, unique_name, shard)
            assert saved is None or int(saved) < int(put[1][1]), "checkpoint passed the record"
            assert cp.dead_lettered == 0
            fix()
            spout.checkpoint(force=True)  # the write is retried before the save
            assert _saved(cfg, unique_name, shard) == put[2][1]
            assert spout.stats().dead_lettered == 1
        finally:
            spout.close()
        entries = [e for es in objects(s3(endpoint_for_s3())).values() for e in es]
        assert [(e["sequence_number"], base64.b64decode(e["data_base64"])) for e in entries] == [
            (put[1][1], b"POISON")
        ]
    finally:
        gen.close()


def endpoint_for_s3() -> str:
    return os.environ["AWS_ENDPOINT_URL_S3"]


def _saved(cfg: SpoutConfig, stream: str, shard: str) -> str | None:
    from kinesis_spout.checkpoint import open_store

    store = open_store(cfg.checkpoint_store, cfg.job_name)
    try:
        cp = store.load(stream).get(shard)
    finally:
        store.close()
    return None if cp is None else cp.sequence_number
