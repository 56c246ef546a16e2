"""SIGKILL mid-stream with spark-submit, then a restart: nothing lost, replays bounded; with
ZooKeeper and DynamoDB (moto's server) checkpoints and job lease."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import spark_job_helpers
from spark_job_helpers import sink_rows, submit_and_kill

from kinesis_spout.checkpoint import open_store
from kinesis_spout.config.load import load_config
from kinesis_spout.spark import run_job
from kinesis_spout.spark.process.sinks import read_parquet_dir
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

# spark35: scripts/test.sh runs this on PySpark 3.5 as well.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
    pytest.mark.spark35,
    pytest.mark.timeout(400),
]

SHARDS = 4
RECORDS = 2400
MAX_IN_FLIGHT = 50


@pytest.mark.parametrize("kind", ["zk", "dynamodb"])
def test_a_job_killed_with_sigkill_resumes_without_loss_and_replays_at_most_max_in_flight(
    spark: Any,
    moto_server: MotoServer,
    moto_client: Any,
    store_url_of: Callable[[str], str],
    unique_name: str,
    tmp_path: Path,
    kind: str,
) -> None:
    create_stream(moto_client, unique_name, SHARDS)
    put = put_records(moto_client, unique_name, make_payloads(RECORDS, 200))
    rows_dir = tmp_path / "rows"
    flags = {
        "stream-name": unique_name,
        "job-name": unique_name,
        "endpoint-url": moto_server.endpoint_url,
        "checkpoint-store": store_url_of(kind),
        "dead-letter": str(tmp_path / "dead-letter"),
        "sink": f"parquet://{rows_dir}",
        "batch-size": "200",
        "max-in-flight": str(MAX_IN_FLIGHT),
        "checkpoint-interval": "0.5",
        "empty-shard-backoff": "0.1",
        "batch-max-wait": "0.3",
    }
    args = [a for k, v in flags.items() for a in (f"--{k}", v)]
    process = f"{spark_job_helpers.__file__}:kill_test_job"
    submit_and_kill(
        process, args, lambda: sink_rows(rows_dir) >= RECORDS // 5, tmp_path / "job.log"
    )
    before = sink_rows(rows_dir)
    assert before < RECORDS, "the kill came too late to be mid-stream"

    overrides = {k.replace("-", "_"): v for k, v in flags.items()}
    cfg = load_config(None, env={}, overrides={**overrides, "stop_when_idle": 1.5})
    summary = run_job(cfg, lambda record: None, spark=spark, progress=None)
    assert summary.records > 0

    table = read_parquet_dir(rows_dir)
    assert table is not None
    seen = Counter(
        zip(
            table.column("shardId").to_pylist(),
            table.column("sequenceNumber").to_pylist(),
            strict=True,
        )
    )
    assert set(seen) == set(put), "records lost"
    dupes = Counter(shard for (shard, _), n in seen.items() for _ in range(n - 1))
    assert all(n <= MAX_IN_FLIGHT for n in dupes.values()), dupes
    last: dict[str, int] = {}
    for shard, seq in put:
        last[shard] = max(last.get(shard, 0), int(seq))
    store = open_store(cfg.checkpoint_store, unique_name)
    try:
        stored = {s: cp.sequence_number for s, cp in store.load(unique_name).items()}
    finally:
        store.close()
    assert stored == {s: str(v) for s, v in last.items()}
