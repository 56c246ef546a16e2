"""The Spark job's Prometheus endpoint, scraped over HTTP while the job runs.

Two rounds of records (some fail every time and are dead-lettered, some fail once
and pass on a fast retry): the counters rise from the first scrape to the second,
and the last scrape, taken when every record is done, matches the job's own
summary line. The job goes through ``kinesis-spout run`` and ``spark-submit``, as
users run it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import spark_job_helpers
from spark_job_helpers import POISON

from devkit.scrape import Scrape, wait_for_scrape
from kinesis_spout.spark.reports import JobSummary
from kinesis_spout.spark.submit import job_environment
from kinesis_spout.testing.servers import MotoServer, free_port
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(400)]

RECORDS = "kinesis_spout_records_total"
RETRY_LIMIT = 2
SUMMARY = re.compile(
    r"^stopped \((?P<why>[^)]*)\) after (?P<batches>\d+) batches: (?P<done>\d+) done "
    r"\(ok (?P<ok>\d+), dead-lettered (?P<dead>\d+)\) \| (?P<records>\d+) deliveries \| "
    r"failed (?P<failed>\d+) \| retried (?P<retried>\d+) \|",
    re.M,
)


def put_round(client: Any, stream: str, n: int, prefix: str, poison: int, flaky: int) -> None:
    """``n`` records: ``poison`` fail every time, the next ``flaky`` fail once."""
    items = make_payloads(n, 64, prefix)
    for i in range(poison):
        items[i] = (items[i][0], POISON + items[i][1])
    for i in range(poison, poison + flaky):
        items[i] = (items[i][0], b"FLAKY" + items[i][1])
    put_records(client, stream, items)


def done(s: Scrape) -> float:
    return s.sum(RECORDS)  # the outcomes are disjoint: their sum is the records done


READ = "kinesis_spout_records_read_total"


def scrape_rounds(url: str, client: Any, stream: str) -> tuple[Scrape, Scrape]:
    """Scrape once the first round is done and again once the second is."""
    first = wait_for_scrape(url, lambda s: done(s) == 100, timeout=240, what="100 records done")
    put_round(client, stream, 50, "b", poison=1, flaky=1)
    second = wait_for_scrape(url, lambda s: done(s) == 150, timeout=120, what="150 records done")
    before, after = first.by("outcome", RECORDS), second.by("outcome", RECORDS)
    assert set(before) == {"acked", "dead_lettered", "expired"}  # each from 0
    assert all(after[k] >= v for k, v in before.items()), (before, after)
    assert second.sum(READ) == 150 > first.sum(READ) == 100
    return first, second


BATCH_LINE = re.compile(r"^batch \d+: .*? \| ok (\d+) \| .*? \| dead-lettered (\d+)", re.M)


def settled(s: Scrape, log_path: Path) -> bool:
    """Every record is done and in a progress line of the job's log, the scrape counts as
    many batches as there are lines, and a checkpoint round has run: the job's final state
    (the last batch's line and the checkpoint round may come just after the last ack)."""
    lines = BATCH_LINE.findall(log_path.read_text(errors="replace"))
    reported = sum(int(ok) + int(dead) for ok, dead in lines)
    return (
        done(s) == reported == 150
        and s.sum("kinesis_spout_batches_total") == len(lines)
        and bool(s.select("kinesis_spout_checkpoint_age_seconds"))
    )


def assert_matches_summary(s: Scrape, summary: JobSummary, shards: int) -> None:
    """The scrape's figures are the summary line's."""
    by = s.by("outcome", RECORDS)
    assert by["acked"] + by["dead_lettered"] == summary.done == 150
    assert by["acked"] == summary.ok
    assert by["dead_lettered"] == summary.dead_lettered == 3
    # every poison record RETRY_LIMIT more times, every flaky one once more
    retried = s.sum("kinesis_spout_retries_total")
    assert retried == summary.retried == 3 * RETRY_LIMIT + 3
    assert s.sum("kinesis_spout_failures_total") == summary.failed
    assert s.sum(READ) + retried == summary.records
    assert s.sum("kinesis_spout_batches_total") == summary.batches
    assert len(s.by("shard", READ)) == shards
    assert len(s.by("shard", "kinesis_spout_behind_latest_seconds")) == shards
    assert len(s.by("shard", "kinesis_spout_in_flight_records")) == shards
    assert s.sum("kinesis_spout_get_records_duration_seconds_count") >= shards
    assert len(s.select("kinesis_spout_checkpoint_age_seconds")) == 1


def parse_summary(text: str) -> JobSummary:
    m = SUMMARY.search(text)
    assert m, text[-3000:]
    return JobSummary(
        int(m["batches"]),
        int(m["records"]),
        int(m["ok"]),
        int(m["failed"]),
        int(m["retried"]),
        int(m["dead"]),
        0.0,
        m["why"],
    )


def test_the_job_serves_metrics_that_rise_and_end_at_its_summary(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 2)
    put_round(moto_client, unique_name, 100, "a", poison=2, flaky=2)
    port = free_port()
    flags = {
        "stream-name": unique_name,
        "job-name": unique_name,
        "endpoint-url": moto_server.endpoint_url,
        "checkpoint-store": f"file://{tmp_path / 'checkpoints'}",
        "dead-letter": str(tmp_path / "dead-letter"),
        "retry-limit": str(RETRY_LIMIT),
        "empty-shard-backoff": "0.1",
        "batch-max-wait": "0.3",
        "checkpoint-interval": "0.5",
        "metrics-port": str(port),
    }
    cmd = [
        sys.executable,
        "-m",
        "kinesis_spout.cli",
        "--verbose",
        "run",
        "--process",
        f"{spark_job_helpers.__file__}:flaky_and_poison",
        "--spark-conf",
        "spark.ui.enabled=false",
        *[a for k, v in flags.items() for a in (f"--{k}", v)],
    ]
    log_path = tmp_path / "job.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd,
            env=job_environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            scrape_rounds(url, moto_client, unique_name)
            last = wait_for_scrape(
                url, lambda s: settled(s, log_path), timeout=60, what="the job's final state"
            )
            # Everything is done: a graceful stop now changes none of these figures.
            os.kill(proc.pid, signal.SIGTERM)
            code = proc.wait(120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
    text = log_path.read_text(errors="replace")
    assert code == 0, text[-3000:]
    (tmp_path / "metrics.txt").write_text(last.text)
    print(last.text)  # a sample of the job's /metrics (pytest -s shows it)
    summary = parse_summary(text)
    assert summary.stopped_because == "SIGTERM"
    assert_matches_summary(last, summary, shards=2)
    assert_startup_said(text)


def assert_startup_said(text: str) -> None:
    """``--verbose`` says where the start-up went, phase by phase, once."""
    lines = [ln for ln in text.splitlines() if "startup: imports" in ln]
    assert len(lines) == 1, text[-3000:]
    body = "imports" + lines[0].split("startup: imports", 1)[1]
    phases = [p.rsplit(" ", 1)[0] for p in body.split(" | ")]
    first = ["imports", "config", "lease", "spark imports", "spark session"]
    assert phases[:5] == first
    assert phases[-2:] == ["first micro-batch", "total"] and "stream open" in phases
