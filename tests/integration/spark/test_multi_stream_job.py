"""The Spark job over several streams (issue 24): one Spark job per micro-batch over the
shards of every stream, each record's ``stream`` column, and per-stream checkpoints,
dead letters and batch ends.

* Three streams of 1, 2 and 4 shards, poison records in each, on moto and kinesis-mock:
  ``spark-submit`` killed with SIGKILL mid-stream, then the job run again until idle:
  nothing lost, the dead letters exactly each stream's poison records, every stream's
  checkpoints at its shards' last records.
* A DataFrame transform routes by the ``stream`` column, and a fan-out counts words of two
  streams, on the executors.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import spark_job_helpers
from spark_job_helpers import POISON, last_per_shard, sink_rows, submit_and_kill

from kinesis_spout.checkpoint import open_store
from kinesis_spout.config import SpoutConfig
from kinesis_spout.config.load import load_config
from kinesis_spout.deadletter import read_dead_letters
from kinesis_spout.spark import build_driver, dataframe_transform, run_job
from kinesis_spout.spark.loop import MicroBatchLoop
from kinesis_spout.spark.process.sinks import read_parquet_dir
from kinesis_spout.testing.servers import KinesisEmulator
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(400)]

SHARDS = {"s1": 1, "s2": 2, "s4": 4}


def fill(
    client: Any, base: str, per_shard: int
) -> tuple[dict[str, list[tuple[str, str]]], dict[str, set[tuple[str, str]]]]:
    """The streams of :data:`SHARDS` filled, every 50th record POISON: what each got put
    (shard, sequence), and its poison records."""
    put: dict[str, list[tuple[str, str]]] = {}
    poison: dict[str, set[tuple[str, str]]] = {}
    for suffix, shards in SHARDS.items():
        name = f"{base}-{suffix}"
        create_stream(client, name, shards)
        items = make_payloads(per_shard * shards, 120, prefix=f"{suffix}-")
        bad = set(range(11, len(items), 50))
        for i in bad:
            items[i] = (items[i][0], POISON + b"-%d" % i)
        put[name] = put_records(client, name, items)
        poison[name] = {put[name][i] for i in bad}
    return put, poison


def assert_dead_letters_per_stream(
    cfg: SpoutConfig, names: list[str], poison: dict[str, set[tuple[str, str]]]
) -> None:
    """Each stream's dead letters are exactly its poison records."""
    dead = read_dead_letters(cfg.dead_letter)
    for name in names:
        mine = {(d["shard_id"], d["sequence_number"]) for d in dead if d["stream"] == name}
        assert mine == poison[name], name


def assert_checkpoints_at_last(
    cfg: SpoutConfig, put: dict[str, list[tuple[str, str]]], names: list[str]
) -> None:
    """Each stream's checkpoints are at its shards' last records."""
    store = open_store(cfg.checkpoint_store, cfg.job_name)
    try:
        for name in names:
            stored = {s: cp.sequence_number for s, cp in store.load(name).items()}
            assert stored == last_per_shard(put[name]), name
    finally:
        store.close()


def test_three_streams_killed_mid_stream_and_restarted_lose_nothing(
    spark: Any,
    emulator: KinesisEmulator,
    emulator_kinesis: Any,
    unique_name: str,
    tmp_path: Path,
) -> None:
    put, poison = fill(emulator_kinesis, unique_name, 150)
    names = list(put)
    rows_dir = tmp_path / "rows"
    flags = {
        "job-name": unique_name,
        "endpoint-url": emulator.endpoint_url,
        "checkpoint-store": f"file://{tmp_path / 'checkpoints'}",
        "dead-letter": str(tmp_path / "dead-letter"),
        "sink": f"parquet://{rows_dir}",
        "batch-size": "100",
        "max-in-flight": "60",
        "retry-limit": "1",
        "retry-backoff": "0.05",
        "checkpoint-interval": "0.5",
        "empty-shard-backoff": "0.1",
        "batch-max-wait": "0.3",
    }
    total = sum(len(p) for p in put.values())
    args = [a for k, v in flags.items() for a in (f"--{k}", v)]
    args += [a for name in names for a in ("--stream", name)]
    process = f"{spark_job_helpers.__file__}:poison_kill_test_job"
    submit_and_kill(process, args, lambda: sink_rows(rows_dir) >= total // 5, tmp_path / "job.log")
    assert sink_rows(rows_dir) < total, "the kill came too late to be mid-stream"

    overrides = {k.replace("-", "_"): v for k, v in flags.items()}
    cfg = load_config(
        None, env={}, overrides={**overrides, "streams": names, "stop_when_idle": 1.5}
    )
    run_job(cfg, spark_job_helpers.slow_with_poison, spark=spark, progress=None)

    table = read_parquet_dir(rows_dir)
    assert table is not None
    seen = set(
        zip(
            table.column("stream").to_pylist(),
            table.column("shardId").to_pylist(),
            table.column("sequenceNumber").to_pylist(),
            strict=True,
        )
    )
    for name in names:
        good = {(name, s, q) for s, q in put[name] if (s, q) not in poison[name]}
        assert good <= seen, f"{name}: lost {sorted(good - seen)[:3]}"
    assert_dead_letters_per_stream(cfg, names, poison)
    assert_checkpoints_at_last(cfg, put, names)


def by_stream(df: Any) -> Any:
    """A transform that routes by stream: records of ``*-s1`` fail when POISON, the
    others pass; the stream is kept for the sink."""
    from pyspark.sql import functions as F

    bad = F.col("data").cast("string").startswith(POISON.decode()) & F.col("stream").endswith("-s1")
    return df.select(
        "_row",
        "stream",
        "shardId",
        "sequenceNumber",
        (~bad).alias("status"),
        F.when(bad, F.lit("poison in s1")).alias("error"),
    )


@pytest.mark.spark35  # on PySpark 3.5 as well (scripts/test.sh)
def test_a_transform_over_three_streams_runs_on_the_executors_and_routes_by_stream(
    spark: Any, moto_server: Any, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """One of the streams is given by ARN: the read tasks name it by ``StreamARN``."""
    put, poison = fill(moto_client, unique_name, 60)
    names = list(put)
    summary = moto_client.describe_stream_summary(StreamName=names[2])
    arn = summary["StreamDescriptionSummary"]["StreamARN"]
    out = tmp_path / "rows"
    cfg = SpoutConfig(
        streams=[*names[:2], arn],
        job_name=unique_name,
        endpoint_url=moto_server.endpoint_url,
        checkpoint_store=f"file://{tmp_path / 'checkpoints'}",
        dead_letter=str(tmp_path / "dead-letter"),
        sink=f"parquet://{out}",
        retry_limit=0,
        empty_shard_backoff=0.1,
        batch_max_wait=0.3,
        checkpoint_interval=0.5,
        stop_when_idle=1.5,
    )
    driver = build_driver(cfg, dataframe_transform(by_stream), spark=spark, progress=None)
    assert isinstance(driver, MicroBatchLoop)
    driver.run()
    assert driver.spark_jobs >= 1 and all(pid != os.getpid() for _, pid in driver.planner.readers)

    rows = read_parquet_dir(out)
    assert rows is not None
    written = Counter(
        zip(
            rows.column("stream").to_pylist(),
            rows.column("shardId").to_pylist(),
            rows.column("sequenceNumber").to_pylist(),
            strict=True,
        )
    )
    s1 = names[0]
    want = {(n, s, q) for n in names for s, q in put[n] if n != s1 or (s, q) not in poison[n]}
    assert set(written) == want and set(written.values()) == {1}
    dead = read_dead_letters(cfg.dead_letter)
    assert {(d["stream"], d["shard_id"], d["sequence_number"]) for d in dead} == {
        (s1, s, q) for s, q in poison[s1]
    }
    assert_checkpoints_at_last(cfg, put, names)


def test_a_stream_deleted_while_the_job_reads_is_let_go_and_the_others_go_on(
    spark: Any, moto_server: Any, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    a, b = f"{unique_name}-a", f"{unique_name}-b"
    for name in (a, b):
        create_stream(moto_client, name, 2)
        put_records(moto_client, name, make_payloads(200, 50, prefix=f"{name[-1]}-"))
    cfg = SpoutConfig(
        streams=[a, b],
        job_name=unique_name,
        endpoint_url=moto_server.endpoint_url,
        checkpoint_store=f"file://{tmp_path / 'checkpoints'}",
        dead_letter=str(tmp_path / "dead-letter"),
        empty_shard_backoff=0.1,
        batch_max_wait=0.3,
        checkpoint_interval=0.5,
        shard_refresh_interval=0.5,
        stop_when_idle=3.0,
    )
    driver = build_driver(cfg, spark_job_helpers.accept, spark=spark, progress=None)
    assert isinstance(driver, MicroBatchLoop)
    outcome: list[BaseException | None] = []
    runner = threading.Thread(target=lambda: outcome.append(_run(driver)), daemon=True)
    runner.start()
    deadline = time.monotonic() + 120
    while driver.spout.stats().acked < 400:  # both streams read
        assert runner.is_alive() and time.monotonic() < deadline, outcome
        time.sleep(0.1)
    moto_client.delete_stream(StreamName=b)
    late = put_records(moto_client, a, make_payloads(100, 50, prefix="late-"))
    runner.join(timeout=180)
    assert not runner.is_alive() and outcome == [None], outcome
    assert b in driver.spout.gone and a in driver.spout.streams.sets  # type: ignore[union-attr]
    store = open_store(cfg.checkpoint_store, unique_name)
    try:
        stored = {s: cp.sequence_number for s, cp in store.load(a).items()}
    finally:
        store.close()
    for shard, seq in last_per_shard(late).items():
        assert stored[shard] == seq  # the stream left read on to its last record


def _run(driver: MicroBatchLoop) -> BaseException | None:
    try:
        driver.run()
    except BaseException as exc:  # the test thread reports it
        return exc
    return None
