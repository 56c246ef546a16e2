"""``kinesis-spout status`` on a ``file://`` store after the Spark job ran (in-process,
local[2], the moto server), through the real command: every shard's checkpoint at its
last sequence number, caught up, dead letters per shard as in the dead-letter
directory; then new records show as waiting, a running driver as the job-lease holder.
Status reads only: no file changes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_job_helpers import POISON, flaky_and_poison

from devkit.holders import start_lease_holder
from devkit.status import run_status, status_json, table_rows
from kinesis_spout.deadletter import read_dead_letters
from kinesis_spout.spark import per_record, run_job
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]

POISON_AT = (3, 10, 11, 40, 77, 101, 150)


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")}


def test_status_after_the_spark_job_matches_the_stream_and_the_dead_letters(
    spark: Any,
    moto_server: MotoServer,
    moto_client: Any,
    job_config: Any,
    unique_name: str,
    tmp_path: Path,
) -> None:
    create_stream(moto_client, unique_name, 3)
    items = make_payloads(160, 40)
    for i in POISON_AT:
        items[i] = (items[i][0], POISON + b"-%d" % i)
    placed = put_records(moto_client, unique_name, items)
    last: dict[str, str] = {}
    for shard, seq in placed:
        last[shard] = seq if shard not in last or int(seq) > int(last[shard]) else last[shard]
    poison_per_shard = Counter(placed[i][0] for i in POISON_AT)

    cfg = job_config(retry_limit=1, batch_size=100)
    summary = run_job(cfg, per_record(flaky_and_poison), spark=spark)
    assert summary.dead_lettered == len(POISON_AT)
    dead_per_shard = Counter(d["shard_id"] for d in read_dead_letters(cfg.dead_letter))
    assert dead_per_shard == poison_per_shard

    args = (
        "--stream-name",
        unique_name,
        "--job-name",
        cfg.job_name,
        "--endpoint-url",
        moto_server.endpoint_url,
        "--checkpoint-store",
        cfg.checkpoint_store,
        "--dead-letter",
        cfg.dead_letter,
    )
    before = snapshot(tmp_path)
    doc = status_json(*args)
    assert [s["shard_id"] for s in doc["shards"]] == sorted(last)
    for s in doc["shards"]:
        shard = s["shard_id"]
        assert s["state"] == "open" and s["lease"] is None
        assert (s["checkpoint"]["sequence"], s["checkpoint"]["sub_sequence"]) == (last[shard], 0)
        assert s["checkpoint"]["age_seconds"] >= 0
        assert s["lag"]["pending"] is False and s["lag"]["millis_behind_latest"] == 0
        assert s["dead_letters"] == dead_per_shard[shard]
    assert doc["summary"]["dead_letters"] == len(POISON_AT) and doc["summary"]["pending"] == 0
    assert doc["job_lease"]["state"] == "free" and doc["workers"] is None
    assert doc["problems"] == [] and doc["notes"] == []

    proc = run_status(*args)
    assert proc.returncode == 0, proc.stderr
    rows = table_rows(proc.stdout)
    assert sorted(rows) == sorted(last)
    for shard, cells in rows.items():
        assert cells[1] == "open" and cells[-1] == f"{last[shard]}:0"
        assert cells[-5:-2] == ["caught", "up", "-"]  # BEHIND, OLDEST
        assert cells[-2] == str(dead_per_shard[shard])
    assert f"{len(POISON_AT)} dead letters" in proc.stdout
    assert snapshot(tmp_path) == before  # nothing written, nothing created

    # New records: the shards they went to have records waiting, the others not.
    more = put_records(moto_client, unique_name, make_payloads(12, 40, prefix="new"))
    doc = status_json(*args)
    got_new = {shard for shard, _ in more}
    for s in doc["shards"]:
        waiting = s["shard_id"] in got_new
        assert s["lag"]["pending"] is waiting
        assert (s["lag"]["next_record_arrival"] is not None) is waiting
    assert doc["summary"]["pending"] == len(got_new)

    # A running driver holds the job lease; killed, it holds nothing.
    holder = start_lease_holder(cfg.checkpoint_store, cfg.job_name)
    try:
        lease = status_json(*args)["job_lease"]
        assert lease["state"] == "held" and lease["holder"].endswith(f":{holder.pid}")
        assert lease["where"] == str(Path(cfg.checkpoint_store[7:]) / cfg.job_name / ".job.lock")
    finally:
        holder.kill()
        holder.wait()
    assert status_json(*args)["job_lease"]["state"] == "free"
