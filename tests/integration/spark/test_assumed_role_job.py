"""The Spark job with ``role_arn`` reading another account's stream by its ARN, on moto's
server (Kinesis, S3, DynamoDB and STS): the driver and each executor assume the role
themselves, and every Kinesis call (the driver's, the executors' reads), the S3 dead
letters and the calls of a ``dynamodb://`` store (the driver's job lease and checkpoints,
the executors' batch ends) are signed with the role's credentials, as moto's request
recorder shows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from spark_job_helpers import POISON, not_poison, record_deliveries

from devkit.awscalls import MotoRequests, caller_arn, client_as_role, executor_env
from kinesis_spout.spark import dataframe_transform, run_job
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]

OTHER_ACCOUNT = "111122223333"
ROLE = f"arn:aws:iam::{OTHER_ACCOUNT}:role/job-reader"


@pytest.fixture
def bucket(moto_server: MotoServer, unique_name: str) -> Iterator[str]:
    s3: Any = boto3.client("s3", endpoint_url=moto_server.endpoint_url, region_name="us-east-1")
    name = unique_name.lower()[:50]
    s3.create_bucket(Bucket=name)
    yield name
    for obj in s3.list_objects_v2(Bucket=name).get("Contents", []):
        s3.delete_object(Bucket=name, Key=obj["Key"])
    s3.delete_bucket(Bucket=name)


def test_the_driver_and_the_executors_sign_every_call_with_the_assumed_role(
    spark: Any,
    moto_server: MotoServer,
    job_config: Any,
    unique_name: str,
    tmp_path: Path,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = moto_server.endpoint_url
    owner = client_as_role(endpoint, ROLE)
    create_stream(owner, unique_name, 2)
    items = make_payloads(120, 60)
    items[7] = (items[7][0], POISON + b"-7")
    put_records(owner, unique_name, items)
    for name in ("AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.setenv(name, endpoint)
    (tmp_path / "deliveries").mkdir()
    cfg = job_config(
        streams=(f"arn:aws:kinesis:us-east-1:{OTHER_ACCOUNT}:stream/{unique_name}",),
        dead_letter=f"s3://{bucket}/dead",
        retry_limit=0,
        role_arn=ROLE,
        role_session_name="billing-job",
        external_id="ext-0042",
    )
    with executor_env(spark, AWS_ENDPOINT_URL_STS=endpoint), MotoRequests(endpoint) as recorder:
        summary = run_job(cfg, record_deliveries(str(tmp_path / "deliveries")), spark=spark)
    assert summary.ok == 119 and summary.dead_lettered == 1
    requests = recorder.requests()

    kinesis = [r for r in requests if r.service == "kinesis"]
    s3 = [r for r in requests if r.service == "s3"]
    assert any(r.method == "PUT" for r in s3)  # the dead letter
    session = f"arn:aws:sts::{OTHER_ACCOUNT}:assumed-role/job-reader/billing-job"
    keys = {str(r.access_key) for r in kinesis + s3}
    assert {caller_arn(endpoint, k) for k in keys} == {session}
    # The executors read (GetRecords) with credentials they assumed themselves: keys the
    # driver never used (it lists the shards and opens the iterators).
    readers = {r.access_key for r in kinesis if r.operation == "GetRecords"}
    driver = {r.access_key for r in kinesis if r.operation == "ListShards"}
    assert readers and driver and not readers & driver
    assumed = [r.params for r in requests if r.operation == "AssumeRole"]
    assert {(p["RoleArn"], p["ExternalId"]) for p in assumed} == {(ROLE, "ext-0042")}


def test_a_dynamodb_store_is_reached_with_the_role_by_the_driver_and_the_executors(
    spark: Any,
    moto_server: MotoServer,
    dynamodb: str,
    job_config: Any,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = moto_server.endpoint_url
    owner = client_as_role(endpoint, ROLE)
    create_stream(owner, unique_name, 2)
    items = make_payloads(120, 60)
    items[7] = (items[7][0], POISON + b"-7")
    put_records(owner, unique_name, items)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", endpoint)
    cfg = job_config(
        streams=(f"arn:aws:kinesis:us-east-1:{OTHER_ACCOUNT}:stream/{unique_name}",),
        checkpoint_store=f"dynamodb://{unique_name}",
        retry_limit=0,
        role_arn=ROLE,
        role_session_name="billing-job",
    )
    with executor_env(spark, AWS_ENDPOINT_URL_STS=endpoint), MotoRequests(endpoint) as recorder:
        summary = run_job(cfg, dataframe_transform(not_poison), spark=spark)
    assert summary.ok == 119 and summary.dead_lettered == 1
    dynamodb_calls = [r for r in recorder.requests() if r.service == "dynamodb"]

    session = f"arn:aws:sts::{OTHER_ACCOUNT}:assumed-role/job-reader/billing-job"
    keys = {str(r.access_key) for r in dynamodb_calls}
    assert {caller_arn(endpoint, k) for k in keys} == {session}
    # The driver writes the checkpoints under the job lease (a transaction); the executors
    # record the ends of their reads (PutItem) with credentials they assumed themselves.
    driver = {r.access_key for r in dynamodb_calls if r.operation == "TransactWriteItems"}
    executors = {r.access_key for r in dynamodb_calls} - driver
    assert driver and executors
    assert "PutItem" in {r.operation for r in dynamodb_calls if r.access_key in executors}
