"""The ``kinesis`` source with ``consumer=efo`` against LocalStack in host mode: the
executors subscribe for each batch's first read of a shard."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from streaming_helpers import BatchSink, assert_exactly_once, assert_shard_order, fill, start_query
from test_streaming_source import shard_max

from devkit.localstack import LocalStackServer
from kinesis_spout.checkpoint import open_store
from kinesis_spout.testing.streams import create_stream, emulator_client

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(300)]


def test_efo_reads_every_record_once_in_order_and_commits(
    kinesis_spark: Any, localstack: LocalStackServer, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(localstack.endpoint_url)
    create_stream(client, unique_name, 2)
    expected = fill(client, unique_name, 300, "a", aggregates=12, per_aggregate=5)
    store_url = f"file://{tmp_path / 'store'}"
    sink = BatchSink(tmp_path / "sink")
    options = {"maxRecordsPerShard": 70, "checkpointStore": store_url, "consumer": "efo"}
    q = start_query(
        kinesis_spark, unique_name, localstack.endpoint_url, sink, tmp_path / "ck", **options
    )
    q.awaitTermination(180)
    assert q.exception() is None
    batches = sink.batches()
    assert len(batches) >= 3  # several batches: each subscribed after the last one's end
    for rows in batches.values():
        per_shard: dict[str, int] = {}
        for r in rows:
            per_shard[r.shard] = per_shard.get(r.shard, 0) + 1
        assert max(per_shard.values()) <= 70  # a cut inside an aggregate resumes in it
    assert_exactly_once(sink.rows(), expected)
    assert_shard_order(batches)

    arn = client.describe_stream_summary(StreamName=unique_name)["StreamDescriptionSummary"]
    consumers = client.list_stream_consumers(StreamARN=arn["StreamARN"])["Consumers"]
    assert [c["ConsumerName"] for c in consumers] == [f"spark-{unique_name}"]
    job = f"spark-{unique_name}"
    readers = [
        json.loads(p.read_text())["reader"]
        for p in (tmp_path / "store" / job).glob(f"{unique_name}.batches/run-*/*/*.json")
    ]
    assert readers and all(int(r.rsplit(":", 1)[1]) != os.getpid() for r in readers)  # executors
    # commit() runs one batch late: the store holds the end of one of the last two batches
    stored = checkpoints(store_url, job, unique_name)
    last = len(batches) - 1
    assert stored in (shard_max(batches, last - 1), shard_max(batches, last - 2))

    # More records, and the same query resumed with polling: it goes on after EFO's end.
    more = fill(client, unique_name, 80, "b")
    resumed = BatchSink(tmp_path / "sink")
    options["consumer"] = "polling"
    q = start_query(
        kinesis_spark, unique_name, localstack.endpoint_url, resumed, tmp_path / "ck", **options
    )
    q.awaitTermination(180)
    assert q.exception() is None
    assert_exactly_once(resumed.rows(), expected + more)
    assert_shard_order(resumed.batches())
    assert set(checkpoints(store_url, job, unique_name)) == {
        "shardId-000000000000",
        "shardId-000000000001",
    }


def checkpoints(url: str, job: str, stream: str) -> dict[str, tuple[int, int]]:
    store = open_store(url, job)
    try:
        return {
            s: (int(c.sequence_number or -1), c.sub_sequence_number)
            for s, c in store.load(stream).items()
        }
    finally:
        store.close()
