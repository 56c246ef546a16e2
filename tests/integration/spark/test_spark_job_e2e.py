"""The Spark job end to end, in-process: moto server, real ZooKeeper, local[2] Spark."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_job_helpers import POISON, failing_word_sink, record_deliveries, words_with_a_bad_one

from kinesis_spout.checkpoint import open_store
from kinesis_spout.deadletter import read_dead_letters
from kinesis_spout.examples import wordcount
from kinesis_spout.spark import dataframe_transform, fan_out, run_job
from kinesis_spout.spark.process.sinks import read_parquet_dir
from kinesis_spout.spark.reports import BatchReport
from kinesis_spout.testing.servers import ZooKeeperServer
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

# spark35: scripts/test.sh runs these on PySpark 3.5 as well.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
    pytest.mark.spark35,
    pytest.mark.timeout(300),
]


def last_sequence_per_shard(put: list[tuple[str, str]]) -> dict[str, str]:
    last: dict[str, int] = {}
    for shard, seq in put:
        last[shard] = max(last.get(shard, 0), int(seq))
    return {s: str(v) for s, v in last.items()}


def stored_checkpoints(url: str, job: str, stream: str) -> dict[str, str | None]:
    store = open_store(url, job)
    try:
        return {s: cp.sequence_number for s, cp in store.load(stream).items()}
    finally:
        store.close()


def test_every_record_is_processed_and_zookeeper_holds_the_last_sequence_per_shard(
    spark: Any,
    moto_client: Any,
    zookeeper: ZooKeeperServer,
    job_config: Any,
    unique_name: str,
    tmp_path: Path,
) -> None:
    create_stream(moto_client, unique_name, 4)
    items = make_payloads(1500, 200)
    put = put_records(moto_client, unique_name, items)
    zk_url = zookeeper.url(f"/{unique_name}")
    cfg = job_config(
        checkpoint_store=zk_url,
        sink=f"parquet://{tmp_path / 'rows'}",
        batch_size=400,
        max_in_flight=300,
    )
    reports: list[BatchReport] = []
    summary = run_job(cfg, lambda record: None, spark=spark, progress=reports.append)

    rows = read_parquet_dir(tmp_path / "rows")
    assert rows is not None
    seen = Counter(
        zip(
            rows.column("shardId").to_pylist(),
            rows.column("sequenceNumber").to_pylist(),
            strict=True,
        )
    )
    assert set(seen) == set(put) and max(seen.values()) == 1  # all, and once (no failures)
    assert sorted(rows.column("data").to_pylist()) == sorted(d for _, d in items)
    assert summary.records == summary.ok == 1500 and summary.failed == 0
    assert sum(r.records for r in reports) == 1500
    assert stored_checkpoints(zk_url, unique_name, unique_name) == last_sequence_per_shard(put)


def test_poison_records_are_delivered_three_times_then_dead_lettered_once_with_the_error(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 2)
    items = make_payloads(300, 100)
    for i in (17, 150, 299):
        items[i] = (items[i][0], POISON + b"-%d" % i)
    put = put_records(moto_client, unique_name, items)
    poison_ids = {f"{put[i][0]}:{put[i][1]}" for i in (17, 150, 299)}
    deliveries = tmp_path / "deliveries"
    deliveries.mkdir()
    cfg = job_config(retry_limit=2, batch_size=100)
    summary = run_job(cfg, record_deliveries(str(deliveries)), spark=spark, progress=None)

    seen = Counter(p.name.split(".")[0] for p in deliveries.iterdir())
    attempts = sorted(int(p.name.split(".")[1]) for p in deliveries.iterdir())
    assert seen == dict.fromkeys(poison_ids, 3)  # 1 delivery + retry_limit retries
    assert attempts == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    dead = read_dead_letters(cfg.dead_letter)
    assert sorted(d["message_id"] for d in dead) == sorted(poison_ids)
    assert all(d["attempts"] == 3 for d in dead)
    assert all(d["error"].startswith("ValueError: poison record b'POISON-") for d in dead)
    assert summary.ok == 297 and summary.dead_lettered == 3
    # the shards moved past the poison: checkpoints at the very end
    assert stored_checkpoints(cfg.checkpoint_store, unique_name, unique_name) == (
        last_sequence_per_shard(put)
    )


def test_a_transform_returning_a_status_column_acks_and_fails_per_row(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    create_stream(moto_client, unique_name, 2)
    items = [(f"k{i}", (b"bad %d" if i % 40 == 0 else b"good %d") % i) for i in range(200)]
    put_records(moto_client, unique_name, items)

    def transform(df: Any) -> Any:
        text = F.col("data").cast("string")
        return df.select(
            "_row",
            F.upper(text).alias("shouting"),
            F.when(text.startswith("bad"), F.lit("rejected"))
            .otherwise(F.lit("ok"))
            .alias("status"),
        )

    cfg = job_config(retry_limit=0, sink=f"parquet://{tmp_path / 'out'}")
    summary = run_job(cfg, dataframe_transform(transform), spark=spark, progress=None)
    out = read_parquet_dir(tmp_path / "out")
    assert out is not None and out.column_names == ["shouting"]
    assert sorted(out.column("shouting").to_pylist()) == sorted(
        d.decode().upper() for _, d in items if d.startswith(b"good")
    )
    dead = read_dead_letters(cfg.dead_letter)
    assert len(dead) == 5 and {d["error"] for d in dead} == {"rejected"}
    assert summary.ok == 195


def test_wordcount_fan_out_counts_every_sentence_once_and_dead_letters_the_poison(
    spark: Any,
    moto_client: Any,
    job_config: Any,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    create_stream(moto_client, unique_name, 2)
    items = wordcount.sample_records(0, 150)
    put = put_records(moto_client, unique_name, items)
    counts_dir = tmp_path / "counts"
    monkeypatch.setenv(wordcount.OUTPUT_ENV, str(counts_dir))
    cfg = job_config(retry_limit=1, batch_size=200)
    run_job(cfg, "kinesis_spout.examples.wordcount:job", spark=spark, progress=None)

    assert wordcount.read_counts(counts_dir) == wordcount.expected_counts(items)
    dead = read_dead_letters(cfg.dead_letter)
    poison = [i for i, (_, d) in enumerate(items) if wordcount.is_poison(d)]
    assert sorted(d["message_id"] for d in dead) == sorted(
        f"{put[i][0]}:{put[i][1]}" for i in poison
    )
    assert stored_checkpoints(cfg.checkpoint_store, unique_name, unique_name) == (
        last_sequence_per_shard(put)
    )


def test_a_sentence_is_not_acked_while_one_of_its_words_fails_in_one_sink(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 1)
    sentences = [b"a b c", b"d boom e", b"f", b""]
    put = put_records(moto_client, unique_name, [(f"k{i}", s) for i, s in enumerate(sentences)])
    cfg = job_config(retry_limit=1, sink=f"parquet://{tmp_path / 'words'}")
    processor = fan_out(
        words_with_a_bad_one, "word string", [failing_word_sink("boom"), lambda df: None]
    )
    reports: list[BatchReport] = []
    run_job(cfg, processor, spark=spark, progress=reports.append)

    dead = read_dead_letters(cfg.dead_letter)
    assert [d["message_id"] for d in dead] == [f"{put[1][0]}:{put[1][1]}"]
    assert dead[0]["attempts"] == 2
    assert "cannot store 'boom'" in dead[0]["error"]
    # the row sink is one more anchored sink: it got the words of every attempt
    words = read_parquet_dir(tmp_path / "words")
    assert words is not None
    assert Counter(words.column("word").to_pylist()) == Counter(
        {"a": 1, "b": 1, "c": 1, "f": 1, "d": 2, "boom": 2, "e": 2}
    )
    assert sum(r.ok for r in reports) == 3 and reports[-1].pending_trees == 0
