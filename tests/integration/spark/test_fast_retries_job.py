"""Fast retries in the Spark job: a failed record is retried in the same
micro-batch, so a poison record is dead-lettered in the batch of its first
failure and a flaky one is acked there; with ``fast_retries = false`` the
retries wait for later batches (the comparison that makes the test able to fail).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from spark_job_helpers import POISON, flaky_and_poison

from kinesis_spout.deadletter import read_dead_letters
from kinesis_spout.spark import dataframe_transform, per_record, run_job
from kinesis_spout.spark.reports import BatchReport
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]

RETRY_LIMIT = 2


def put_mixed(client: Any, stream: str) -> tuple[int, int]:
    """400 records on 2 shards: 8 poison, 8 flaky; returns (poison, flaky)."""
    create_stream(client, stream, 2)
    items = make_payloads(400, 60)
    for i in range(5, 400, 50):
        items[i] = (items[i][0], POISON + b"-%d" % i)
        items[i + 20] = (items[i + 20][0], b"FLAKY-%d" % i)
    put_records(client, stream, items)
    return 8, 8


@pytest.mark.parametrize("fast", [True, False])
def test_poison_is_dead_lettered_in_the_batch_of_its_first_failure(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, fast: bool
) -> None:
    poison, flaky = put_mixed(moto_client, unique_name)
    cfg = job_config(
        retry_limit=RETRY_LIMIT,
        batch_size=100,
        max_in_flight=100,
        fast_retries=fast,
        retry_backoff=0.0,
    )
    reports: list[BatchReport] = []
    summary = run_job(cfg, per_record(flaky_and_poison), spark=spark, progress=reports.append)
    assert (summary.ok, summary.dead_lettered) == (400 - poison, poison)
    dead = read_dead_letters(cfg.dead_letter)
    assert len(dead) == poison and {d["attempts"] for d in dead} == {RETRY_LIMIT + 1}
    assert summary.retried == poison * RETRY_LIMIT + flaky
    if fast:
        # every failure is final (poison) and written in its own batch
        assert summary.failed == poison
        assert all(r.failed == r.dead_lettered for r in reports), [r.line() for r in reports]
    else:
        assert summary.failed == poison * (RETRY_LIMIT + 1) + flaky
        assert any(r.failed > r.dead_lettered for r in reports)


def test_fast_retries_that_end_ok_are_counted_when_reads_are_shuffled(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    """With ``process_partitions`` the records are processed after a shuffle; a flaky
    record acked on its fast retry still counts that retry, as without the shuffle."""
    poison, flaky = put_mixed(moto_client, unique_name)
    cfg = job_config(
        retry_limit=RETRY_LIMIT,
        batch_size=100,
        max_in_flight=100,
        process_partitions=2,
        retry_backoff=0.0,
    )
    summary = run_job(cfg, per_record(flaky_and_poison), spark=spark)
    assert (summary.ok, summary.dead_lettered) == (400 - poison, poison)
    assert summary.retried == poison * RETRY_LIMIT + flaky


def test_a_transform_gets_its_failed_rows_re_run_by_a_follow_up_job(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    poison, flaky = put_mixed(moto_client, unique_name)

    def transform(df: Any) -> Any:
        text = F.col("data").cast("string")
        bad = text.startswith("POISON") | (text.startswith("FLAKY") & (F.col("attempt") < 2))
        status = F.when(bad, F.lit("rejected")).otherwise(F.lit("ok"))
        return df.select("_row", text.alias("text"), status.alias("status"))

    cfg = job_config(
        retry_limit=RETRY_LIMIT,
        batch_size=100,
        sink=f"parquet://{tmp_path / 'out'}",
    )
    reports: list[BatchReport] = []
    summary = run_job(cfg, dataframe_transform(transform), spark=spark, progress=reports.append)
    assert (summary.ok, summary.dead_lettered, summary.failed) == (400 - poison, poison, poison)
    assert summary.retried == poison * RETRY_LIMIT + flaky
    assert all(r.failed == r.dead_lettered for r in reports)
    dead = read_dead_letters(cfg.dead_letter)
    assert {(d["attempts"], d["error"]) for d in dead} == {(RETRY_LIMIT + 1, "rejected")}


def test_a_failed_record_older_than_max_record_age_is_dead_lettered_as_expired(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    poison, flaky = put_mixed(moto_client, unique_name)
    time.sleep(2.5)  # every record is now older than max_record_age
    cfg = job_config(retry_limit=5, batch_size=100, max_record_age=2.0)
    reports: list[BatchReport] = []
    summary = run_job(cfg, per_record(flaky_and_poison), spark=spark, progress=reports.append)
    dead = read_dead_letters(cfg.dead_letter)
    # no retry at all: the poison and the flaky records are given up at their first failure
    assert sorted((d["reason"], d["attempts"]) for d in dead) == [("expired", 1)] * (poison + flaky)
    assert (summary.ok, summary.expired, summary.retried) == (
        400 - poison - flaky,
        poison + flaky,
        0,
    )
    assert "of which expired" in summary.line()
    assert sum(r.expired for r in reports) == poison + flaky
