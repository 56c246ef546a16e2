"""The ``kinesis`` source's progress through Spark's own ``StreamingQueryProgress``: the
listener of docs/streaming-source.md, added to a real query on local[2] Spark."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from streaming_helpers import BatchSink, fill, start_query

from kinesis_spout.metrics import InMemoryMetrics
from kinesis_spout.streaming.progress import KinesisProgressListener, kinesis_progress
from kinesis_spout.testing.servers import MotoServer

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PER_SHARD = 40


def test_the_listener_sees_rows_offsets_and_metrics_of_each_batch(
    kinesis_spark: Any,
    moto_server: MotoServer,
    moto_client: Any,
    stream: str,
    tmp_path: Path,
) -> None:
    expected = fill(moto_client, stream, 300, "p")
    metrics = InMemoryMetrics()
    listener = KinesisProgressListener(metrics=metrics)
    kinesis_spark.streams.addListener(listener)
    sink = BatchSink(tmp_path / "sink")
    try:
        q = start_query(
            kinesis_spark,
            stream,
            moto_server.endpoint_url,
            sink,
            tmp_path / "ck",
            maxRecordsPerShard=PER_SHARD,
        )
        q.awaitTermination(180)
        assert q.exception() is None
        # Listener events arrive asynchronously: wait until they cover every row.
        deadline = time.monotonic() + 60
        while sum(p.num_input_rows for p in listener.progress) < len(expected):
            assert time.monotonic() < deadline, listener.progress
            time.sleep(0.2)
        last = q.lastProgress
    finally:
        kinesis_spark.streams.removeListener(listener)

    reports = [p for p in listener.progress if p.query_id == str(q.id)]
    batches = sink.batches()
    assert len(batches) >= 2  # maxRecordsPerShard spreads the rows over several batches
    rows_by_batch = {p.batch_id: p.num_input_rows for p in reports if p.num_input_rows}
    assert rows_by_batch == {bid: len(rows) for bid, rows in batches.items() if rows}
    for p in reports:
        assert p.stream == stream and p.job == f"spark-{stream}"
        assert "PythonMicroBatchStream" in p.description
        assert 0 < len(p.quotas) <= 4 and all(0 < n <= PER_SHARD for n in p.quotas.values())
        assert isinstance(p.custom_metrics, dict)
    plans = [p.plan for p in reports]
    assert plans == sorted(plans) and len(set(plans)) == len(plans)
    later = [p for p in reports if p.plan > plans[0] and p.num_input_rows]
    assert later and all(any(a is not None for a in p.after.values()) for p in later)
    # The same report, from the query's own lastProgress (a dict).
    (from_dict,) = kinesis_progress(last)
    assert from_dict.plan in plans and from_dict.stream == stream
    assert metrics.count("streaming_input_rows") == len(expected)
    assert metrics.count("batches") == len(reports)
