"""The ``kinesis`` source with ``consumer=efo`` against LocalStack in host mode: the
executors subscribe for each batch's first read of a shard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from streaming_helpers import BatchSink, assert_exactly_once, assert_shard_order, fill, start_query

from kinesis_spout.checkpoint import open_store
from kinesis_spout.testing.localstack import LocalStackServer
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
    store = open_store(store_url, f"spark-{unique_name}")
    try:
        stored = store.load(unique_name)
    finally:
        store.close()
    assert set(stored) == {"shardId-000000000000", "shardId-000000000001"}
