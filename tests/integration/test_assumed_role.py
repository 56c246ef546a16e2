"""Assumed roles against moto's STS (moto's server over HTTP, ``AWS_ENDPOINT_URL_STS``).

moto gives every AssumeRole call an access key of its own and answers GetCallerIdentity
for it with the role session's ARN, and its request recorder keeps each request's
``Authorization`` header: so the tests check, on the server's side, which credentials
signed each Kinesis and S3 call.

* The credentials of ``role_arn`` are assumed again before they expire (botocore's
  refreshable credentials, on a clock the test moves), with the session name and the
  external ID.
* A spout with ``role_arn`` and a stream ARN reads another account's stream (moto keeps
  each account's streams apart, by the account of the key that signs), signing every
  Kinesis call and its S3 dead letter with the role's credentials; a profile with its
  own ``role_arn`` still works.
* A ``dynamodb://`` checkpoint store is reached with the role too: every DynamoDB call of
  the spout (table, job lease, checkpoints), of ``status``, ``checkpoints`` and
  ``checkpoints reset``, and each role has a client of its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from kit import spout_config

from devkit.awscalls import MotoRequests, RecordedRequest, caller_arn, client_as_role
from kinesis_spout.aws import (
    ROLE_SECONDS,
    AssumedRole,
    assume_role_refresher,
    assumed_role_credentials,
)
from kinesis_spout.checkpoint.dynamodb_table import dynamodb_client
from kinesis_spout.cli import main as cli_main
from kinesis_spout.config import SpoutConfig
from kinesis_spout.config.load import to_toml
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

OTHER_ACCOUNT = "111122223333"
ROLE = f"arn:aws:iam::{OTHER_ACCOUNT}:role/stream-reader"


@pytest.fixture
def moto_sts(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> MotoServer:
    """moto's server as the STS (and S3) endpoint of every client made in the test."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto_server.endpoint_url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_server.endpoint_url)
    return moto_server


@pytest.fixture
def bucket(moto_sts: MotoServer, unique_name: str) -> Iterator[str]:
    s3: Any = boto3.client("s3", endpoint_url=moto_sts.endpoint_url, region_name="us-east-1")
    name = unique_name.lower()[:50]
    s3.create_bucket(Bucket=name)
    yield name
    for obj in s3.list_objects_v2(Bucket=name).get("Contents", []):
        s3.delete_object(Bucket=name, Key=obj["Key"])
    s3.delete_bucket(Bucket=name)


def signed(requests: list[RecordedRequest], service: str) -> list[RecordedRequest]:
    return [r for r in requests if r.service == service]


def test_the_role_is_assumed_again_before_its_credentials_expire(moto_sts: MotoServer) -> None:
    role = AssumedRole(ROLE, "refresh-test", "ext-4711", "us-east-1")
    now = [datetime.now(UTC)]
    refresh = assume_role_refresher(botocore.session.Session(), role)
    creds = assumed_role_credentials(refresh, clock=lambda: now[0])
    with MotoRequests(moto_sts.endpoint_url) as recorder:
        first = creds.get_frozen_credentials()
        now[0] += timedelta(seconds=ROLE_SECONDS - 16 * 60)  # 16 minutes left: still good
        kept = creds.get_frozen_credentials()
        now[0] += timedelta(minutes=11)  # 5 minutes left: assumed again before use
        second = creds.get_frozen_credentials()

    assert kept.access_key == first.access_key
    assert second.access_key != first.access_key
    session = f"arn:aws:sts::{OTHER_ACCOUNT}:assumed-role/stream-reader/{role.session_name}"
    assert caller_arn(moto_sts.endpoint_url, second.access_key) == session
    calls = [r.params for r in recorder.requests() if r.operation == "AssumeRole"]
    assert len(calls) == 2
    for params in calls:
        assert params["RoleArn"] == ROLE
        assert params["RoleSessionName"] == "refresh-test"
        assert params["ExternalId"] == "ext-4711"
        assert params["DurationSeconds"] == str(ROLE_SECONDS)


def read_all(cfg: SpoutConfig, count: int, fail_first: bool = False) -> int:
    """Read ``count`` records with a spout of ``cfg``, acking each (failing the first
    one, which ``retry_limit = 0`` dead-letters at once); the records read."""
    seen = 0
    with KinesisSpout(cfg) as spout:
        for _ in range(200):
            for record in spout.next_batch(1000):
                if fail_first and seen == 0:
                    spout.fail(record, "first")
                else:
                    spout.ack(record)
                seen += 1
            if seen >= count:
                break
    return seen


def test_a_spout_with_role_arn_reads_another_accounts_stream_signing_with_the_role(
    moto_sts: MotoServer, unique_name: str, tmp_path: Path, bucket: str
) -> None:
    owner = client_as_role(moto_sts.endpoint_url, ROLE)
    create_stream(owner, unique_name, 2)
    put_records(owner, unique_name, make_payloads(40, 50))
    arn = f"arn:aws:kinesis:us-east-1:{OTHER_ACCOUNT}:stream/{unique_name}"
    cfg = spout_config(
        under=tmp_path,
        streams=(arn,),
        job_name=unique_name,
        endpoint_url=moto_sts.endpoint_url,
        dead_letter=f"s3://{bucket}/dead",
        retry_limit=0,
        role_arn=ROLE,
        role_session_name="orders-reader",
        external_id="ext-4711",
    )
    with MotoRequests(moto_sts.endpoint_url) as recorder:
        assert read_all(cfg, 40, fail_first=True) == 40
    requests = recorder.requests()

    kinesis, s3 = signed(requests, "kinesis"), signed(requests, "s3")
    assert {"ListShards", "GetShardIterator", "GetRecords"} <= {r.operation for r in kinesis}
    assert any(r.method == "PUT" for r in s3)  # the dead letter
    session = f"arn:aws:sts::{OTHER_ACCOUNT}:assumed-role/stream-reader/orders-reader"
    keys = {r.access_key for r in kinesis + s3}
    assert {caller_arn(moto_sts.endpoint_url, str(k)) for k in keys} == {session}
    assumed = [r.params for r in requests if r.operation == "AssumeRole"]
    assert assumed and all(p["ExternalId"] == "ext-4711" for p in assumed)


def test_a_profile_with_its_own_role_arn_keeps_working(
    moto_sts: MotoServer,
    moto_client: Any,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config_file = tmp_path / "aws-config"
    config_file.write_text(
        "[profile base]\naws_access_key_id = base-key\naws_secret_access_key = base-secret\n"
        "[profile reader]\nrole_arn = arn:aws:iam::123456789012:role/profile-reader\n"
        "source_profile = base\nrole_session_name = from-profile\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config_file))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # the profile's, not these
        monkeypatch.delenv(name, raising=False)
    create_stream(moto_client, unique_name, 1)
    put_records(moto_client, unique_name, make_payloads(10, 50))
    cfg = spout_config(
        under=tmp_path,
        stream_name=unique_name,
        job_name=unique_name,
        endpoint_url=moto_sts.endpoint_url,
        profile="reader",
    )
    with MotoRequests(moto_sts.endpoint_url) as recorder:
        assert read_all(cfg, 10) == 10
    requests = recorder.requests()

    keys = {r.access_key for r in signed(requests, "kinesis")}
    session = "arn:aws:sts::123456789012:assumed-role/profile-reader/from-profile"
    assert {caller_arn(moto_sts.endpoint_url, str(k)) for k in keys} == {session}
    (assume,) = [r for r in requests if r.operation == "AssumeRole"]
    assert assume.access_key == "base-key"  # the source profile's credentials assumed it


def signed_by(endpoint: str, requests: list[RecordedRequest]) -> set[str]:
    """Who signed ``requests``: the caller ARN of each access key."""
    return {caller_arn(endpoint, str(r.access_key)) for r in requests}


def test_a_dynamodb_store_is_reached_with_the_role_by_the_spout_status_and_checkpoints(
    moto_sts: MotoServer,
    dynamodb: str,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    endpoint = moto_sts.endpoint_url
    owner = client_as_role(endpoint, ROLE)
    create_stream(owner, unique_name, 2)
    put_records(owner, unique_name, make_payloads(20, 50))
    arn = f"arn:aws:kinesis:us-east-1:{OTHER_ACCOUNT}:stream/{unique_name}"
    cfg = spout_config(
        under=tmp_path,
        streams=(arn,),
        job_name=unique_name,
        endpoint_url=endpoint,
        checkpoint_store=f"dynamodb://{unique_name}",
        role_arn=ROLE,
        role_session_name="store-writer",
    )
    config_file = tmp_path / "job.toml"
    config_file.write_text(to_toml(cfg))

    calls: dict[str, list[RecordedRequest]] = {}
    with MotoRequests(endpoint) as recorder:
        assert read_all(cfg, 20) == 20
    calls["spout"] = signed(recorder.requests(), "dynamodb")
    commands = {
        "status": ["status"],
        "checkpoints": ["checkpoints"],
        "checkpoints reset": ["checkpoints", "reset", "--all", "--to-trim-horizon"],
    }
    printed: dict[str, str] = {}
    for name, args in commands.items():
        capsys.readouterr()
        with MotoRequests(endpoint) as recorder:
            assert cli_main([*args, f"--config={config_file}"]) == 0
        calls[name] = signed(recorder.requests(), "dynamodb")
        printed[name] = capsys.readouterr().out

    session = f"arn:aws:sts::{OTHER_ACCOUNT}:assumed-role/stream-reader/store-writer"
    made = {"CreateTable", "GetItem", "PutItem", "Query"}  # the table, the lease, the checkpoints
    for name, ops in (
        ("spout", made),
        ("status", {"GetItem", "Query"}),
        ("checkpoints", {"Query"}),
        ("checkpoints reset", {"GetItem", "PutItem", "Query"}),  # the job lease, the reset
    ):
        assert ops <= {r.operation for r in calls[name]}, name
        assert signed_by(endpoint, calls[name]) == {session}, name
        assert os.environ["AWS_ACCESS_KEY_ID"] not in {r.access_key for r in calls[name]}
    # The table, in the role's account, holds what the spout saved.
    assert f"2 checkpoints of job {unique_name!r}" in printed["checkpoints"]
    assert f"reset 2 checkpoints of job {unique_name!r}" in printed["checkpoints reset"]


def test_each_role_has_a_dynamodb_client_of_its_own(moto_sts: MotoServer, dynamodb: str) -> None:
    first = AssumedRole(ROLE, "first", None, "us-east-1")
    second = AssumedRole(f"arn:aws:iam::{OTHER_ACCOUNT}:role/auditor", "second")
    clients = [dynamodb_client("us-east-1", None, role) for role in (first, second, None)]
    assert dynamodb_client("us-east-1", None, first) is clients[0]
    with MotoRequests(moto_sts.endpoint_url) as recorder:
        for client in clients:
            client.list_tables()
    calls = signed(recorder.requests(), "dynamodb")
    assert [caller_arn(moto_sts.endpoint_url, str(r.access_key)) for r in calls] == [
        f"arn:aws:sts::{OTHER_ACCOUNT}:assumed-role/stream-reader/first",
        f"arn:aws:sts::{OTHER_ACCOUNT}:assumed-role/auditor/second",
        "arn:aws:sts::123456789012:user/moto",
    ]
