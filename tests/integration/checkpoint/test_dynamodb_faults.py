"""The DynamoDB store when DynamoDB says no: throttled (the project's fault proxy before
moto's server, answering ``ProvisionedThroughputExceededException``) and access denied
(a moto server enforcing IAM). Each is one line naming the table and the cause; a
throttled checkpoint round is kept by the reader and saved at a later round."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from kit import spout_config

from devkit.faultproxy import FaultProxy
from kinesis_spout.checkpoint import open_store
from kinesis_spout.checkpoint.dynamodb_table import ATTEMPTS
from kinesis_spout.errors import CheckpointError, CheckpointStoreUnavailableError
from kinesis_spout.metrics import InMemoryMetrics
from kinesis_spout.records import Checkpoint
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SHARD = "shardId-000000000000"
WRITES = {"PutItem", "TransactWriteItems"}


def cp(seq: str) -> Checkpoint:
    return Checkpoint("orders", SHARD, seq)


@pytest.fixture
def proxy(dynamodb: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """The fault proxy before moto's DynamoDB, injecting faults in writes only."""
    with FaultProxy(dynamodb, seed=7, operations=WRITES) as one:
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", one.endpoint_url)
        yield one


def test_a_throttled_save_backs_off_then_is_unavailable_naming_the_table(
    proxy: FaultProxy, unique_name: str
) -> None:
    store = open_store(f"dynamodb://{unique_name}", "billing")
    try:
        store.save(cp("1"))
        proxy.throttle = 1.0
        with pytest.raises(CheckpointStoreUnavailableError) as info:
            store.save(cp("2"))
        message = str(info.value)
        assert f"DynamoDB table {unique_name!r}" in message and "\n" not in message
        assert "ProvisionedThroughputExceededException" in message
        assert proxy.injected.throttle == ATTEMPTS  # tried again after each backoff
        proxy.throttle = 0.5  # half the writes throttled: the backoff gets them through
        assert store.save(cp("3")).sequence_number == "3"
        assert store.load("orders")[SHARD].sequence_number == "3"
    finally:
        store.close()


def test_a_reader_keeps_a_throttled_round_and_saves_it_once_the_table_lets_it(
    proxy: FaultProxy,
    moto_server: MotoServer,
    moto_client: Any,
    unique_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    create_stream(moto_client, unique_name, 2)
    placed = put_records(moto_client, unique_name, make_payloads(60, 50))
    last: dict[str, str] = {}
    for shard, seq in placed:
        last[shard] = seq if int(seq) > int(last.get(shard, "0")) else last[shard]
    url = f"dynamodb://{unique_name}"
    cfg = spout_config(
        stream_name=unique_name,
        job_name="billing",
        endpoint_url=moto_server.endpoint_url,
        checkpoint_store=url,
        checkpoint_interval=0.1,
    )
    metrics = InMemoryMetrics()
    reader = open_store(url, "billing")  # this process holds no lease: it only reads

    def stored() -> dict[str, str | None]:
        return {s: c.sequence_number for s, c in reader.load(unique_name).items()}

    with KinesisSpout(cfg, metrics=metrics) as spout:
        proxy.throttle = 1.0  # from now on every checkpoint write is throttled
        acked, deadline = 0, time.monotonic() + 60
        while acked < len(placed) or metrics.count("checkpoint_store_errors") < 2:
            batch = spout.next_batch(100)
            spout.ack_many(batch)
            acked += len(batch)
            assert time.monotonic() < deadline, (acked, metrics.count("checkpoint_store_errors"))
            time.sleep(0.02)
        assert stored() != last  # nothing of the last rounds was saved...
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(
            f"DynamoDB table {unique_name!r}" in m and "ProvisionedThroughputExceeded" in m
            for m in warned
        ), warned
        proxy.clear_faults()  # ...and nothing was lost: the next round saves it
        while stored() != last:
            spout.next_batch(100)
            assert time.monotonic() < deadline + 30, stored()
            time.sleep(0.05)
    reader.close()


# -- access denied: a moto server that enforces IAM ----------------------------------------


class AuthMoto(MotoServer):
    """A moto server that enforces IAM after its first three requests (the admin's setup)."""

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "INITIAL_NO_AUTH_ACTION_COUNT": "3"}


READ_AND_WRITE = ["dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:Query"]


@pytest.fixture(scope="module")
def auth_moto() -> Iterator[tuple[str, dict[str, str]]]:
    """The server and an admin's keys (allowed everything)."""
    with AuthMoto() as server:
        url = server.endpoint_url
        boot = boto3.client("iam", endpoint_url=url, region_name="us-east-1")
        boot.create_user(UserName="admin")
        allow(boot, "admin", ["*"])
        key = boot.create_access_key(UserName="admin")["AccessKey"]  # the third request
        yield (
            url,
            {
                "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            },
        )


def allow(iam: Any, user: str, actions: list[str]) -> None:
    doc = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
    }
    iam.put_user_policy(UserName=user, PolicyName="p", PolicyDocument=json.dumps(doc))


def as_admin(auth_moto: tuple[str, dict[str, str]], mp: pytest.MonkeyPatch) -> None:
    """From now on this process's DynamoDB calls go to the server, as its admin's."""
    url, keys = auth_moto
    mp.setenv("AWS_ENDPOINT_URL_DYNAMODB", url)
    for name, value in keys.items():
        mp.setenv(name, value)


def as_user(
    auth_moto: tuple[str, dict[str, str]], user: str, actions: list[str], mp: pytest.MonkeyPatch
) -> None:
    """From now on this process's DynamoDB calls are ``user``'s, allowed ``actions`` only."""
    url, keys = auth_moto
    iam = boto3.client(
        "iam",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"],
    )
    iam.create_user(UserName=user)
    allow(iam, user, actions)
    key = iam.create_access_key(UserName=user)["AccessKey"]
    mp.setenv("AWS_ENDPOINT_URL_DYNAMODB", url)
    mp.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    mp.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])


def test_a_missing_table_that_may_not_be_created_is_one_line_naming_it_and_the_action(
    auth_moto: tuple[str, dict[str, str]], unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_user(auth_moto, f"{unique_name}-u", [*READ_AND_WRITE, "dynamodb:PutItem"], monkeypatch)
    with pytest.raises(CheckpointError) as info:
        open_store(f"dynamodb://{unique_name}", "billing")
    message = str(info.value)
    assert message.startswith(
        f"DynamoDB table {unique_name!r} does not exist and cannot be created: access denied "
        "to dynamodb:CreateTable"
    ), message
    assert "\n" not in message and "<" not in message  # no XML body, one line


def test_a_write_that_is_not_allowed_is_one_line_naming_the_table_and_the_action(
    auth_moto: tuple[str, dict[str, str]], unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_admin(auth_moto, monkeypatch)
    open_store(f"dynamodb://{unique_name}", "billing").close()  # the admin makes the table
    as_user(auth_moto, f"{unique_name}-u", READ_AND_WRITE, monkeypatch)
    store = open_store(f"dynamodb://{unique_name}", "billing")
    assert store.load("orders") == {}  # reading is allowed
    with pytest.raises(CheckpointError) as info:
        store.save(cp("5"))
    message = str(info.value)
    assert message.startswith(
        f"DynamoDB table {unique_name!r}: access denied to dynamodb:PutItem"
    ), message
    assert "\n" not in message and "<" not in message
    assert not isinstance(info.value, CheckpointStoreUnavailableError)  # not retried forever
