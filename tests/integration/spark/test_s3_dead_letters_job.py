"""The Spark job with dead letters in S3 (moto's server for Kinesis and S3).

``kinesis-spout run`` is killed with SIGKILL mid-stream and the job restarted:
every poison record is in S3 exactly once with its full payload. Then
``kinesis-spout dead-letters redrive --delete`` puts them back on the stream,
the "fixed" job processes them, and the bucket is empty.
"""

from __future__ import annotations

import base64
import functools
import os
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest
import spark_job_helpers
from spark_job_helpers import submit_and_kill

from kinesis_spout.cli import main as cli_main
from kinesis_spout.config.load import load_config
from kinesis_spout.deadletter.s3 import iter_s3_entries
from kinesis_spout.spark import per_record, run_job
from kinesis_spout.spark.process.sinks import read_parquet_dir
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(400)]

SHARDS = 2
RECORDS = 1200
BUCKET = "job-dead-letters"


def s3_entries(endpoint: str, prefix: str) -> list[dict[str, Any]]:
    client = boto3.session.Session().client("s3", endpoint_url=endpoint, region_name="us-east-1")
    return list(iter_s3_entries(client, BUCKET, prefix))


def sink_rows(directory: Path) -> list[bytes]:
    try:
        table = read_parquet_dir(directory)
    except OSError:
        return []
    return [] if table is None else table.column("data").to_pylist()


def test_poison_records_land_in_s3_once_across_a_kill_and_are_redriven(
    spark: Any,
    moto_server: MotoServer,
    moto_client: Any,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = moto_server.endpoint_url
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    s3 = boto3.session.Session().client("s3", endpoint_url=endpoint, region_name="us-east-1")
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=BUCKET)
    create_stream(moto_client, unique_name, SHARDS)
    payloads = make_payloads(RECORDS, 100)
    for i in range(7, RECORDS, 50):  # 24 poison records, spread over the stream
        payloads[i] = (payloads[i][0], spark_job_helpers.POISON + payloads[i][1][6:])
    poison = {p[1] for p in payloads if p[1].startswith(spark_job_helpers.POISON)}
    put_records(moto_client, unique_name, payloads)
    rows, fixed = tmp_path / "rows", tmp_path / "fixed"
    flags = {
        "stream-name": unique_name,
        "job-name": unique_name,
        "endpoint-url": endpoint,
        "checkpoint-store": f"file://{tmp_path / 'cp'}",
        "dead-letter": f"s3://{BUCKET}/dl",
        "sink": f"parquet://{rows}",
        "batch-size": "100",
        "max-in-flight": "100",
        "checkpoint-interval": "0.5",
        "empty-shard-backoff": "0.1",
        "batch-max-wait": "0.3",
        "retry-limit": "2",
    }
    prefix = f"dl/{unique_name}/{unique_name}/"
    env = {**os.environ, "KSPOUT_TEST_FIXED": str(fixed), "AWS_ENDPOINT_URL_S3": endpoint}
    args = [a for k, v in flags.items() for a in (f"--{k}", v)]
    submit_and_kill(
        f"{spark_job_helpers.__file__}:poison_job",
        args,
        lambda: len(s3_entries(endpoint, prefix)) >= 3 and len(sink_rows(rows)) >= RECORDS // 5,
        tmp_path / "job.log",
        env,
    )
    assert len(sink_rows(rows)) < RECORDS - len(poison), "the kill came too late"

    overrides = {k.replace("-", "_"): v for k, v in flags.items()}
    cfg = load_config(None, env={}, overrides={**overrides, "stop_when_idle": 1.5})
    job = per_record(functools.partial(spark_job_helpers.poison_until_fixed, str(fixed)))
    summary = run_job(cfg, job, spark=spark, progress=None)
    assert summary.records > 0

    entries = s3_entries(endpoint, prefix)
    ids = Counter(e["message_id"] for e in entries)
    assert all(n == 1 for n in ids.values()), "a record dead-lettered twice"
    assert {base64.b64decode(e["data_base64"]) for e in entries} == poison
    assert {(e["reason"], e["attempts"], e["job"]) for e in entries} == {
        ("exhausted", 3, unique_name)
    }
    assert set(sink_rows(rows)) == {p[1] for p in payloads} - poison, "records lost"

    args = [
        f"--{k}={v}"
        for k, v in flags.items()
        if k in ("stream-name", "job-name", "endpoint-url", "dead-letter")
    ]
    assert cli_main(["dead-letters", "redrive", "--delete", *args]) == 0
    assert s3_entries(endpoint, prefix) == []
    fixed.touch()
    run_job(cfg, job, spark=spark, progress=None)
    assert poison <= set(sink_rows(rows)), "re-driven records not processed"
