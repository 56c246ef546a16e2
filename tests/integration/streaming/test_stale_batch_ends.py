"""Batch-end records left by an earlier run of a query are never used (issue 25, hole 2).

A query restarted with a new ``checkpointLocation`` but the same ``jobName`` and
checkpoint store numbers its batches from 1 again; the records of the earlier
run's last batches (never removed: Spark does not commit a run's last batch)
must not be taken as this run's ends.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from streaming_helpers import BatchSink, assert_exactly_once, assert_shard_order, fill, start_query

from kinesis_spout.testing.servers import KinesisMock
from kinesis_spout.testing.streams import create_stream, emulator_client, wait_active

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def _split(client: Any, stream: str) -> None:
    client.split_shard(
        StreamName=stream, ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**127)
    )
    deadline = time.monotonic() + 30
    while len(client.list_shards(StreamName=stream)["Shards"]) < 3:
        assert time.monotonic() < deadline, "the split's children never showed up"
        time.sleep(0.1)
    wait_active(client, stream)


def test_a_new_checkpoint_location_reads_everything_despite_the_old_runs_records(
    kinesis_spark: Any, kinesis_mock: KinesisMock, unique_name: str, tmp_path: Path
) -> None:
    """The issue's reproduction: kinesis-mock closes a split parent (moto never does)."""
    client = emulator_client(kinesis_mock.endpoint_url)
    create_stream(client, unique_name, 1)
    first = fill(client, unique_name, 40, "a")
    _split(client, unique_name)
    store = f"file://{tmp_path / 'store'}"  # shared by both runs, as jobName is
    old = BatchSink(tmp_path / "old")
    q = start_query(
        kinesis_spark,
        unique_name,
        kinesis_mock.endpoint_url,
        old,
        tmp_path / "ck-old",
        maxRecordsPerShard=10,
        checkpointStore=store,
    )
    q.awaitTermination(120)
    assert q.exception() is None
    assert_exactly_once(old.rows(), first)

    second = fill(client, unique_name, 20, "b")  # lands in the children
    new = BatchSink(tmp_path / "new")
    q = start_query(
        kinesis_spark,
        unique_name,
        kinesis_mock.endpoint_url,
        new,
        tmp_path / "ck-new",
        maxRecordsPerShard=5,
        checkpointStore=store,
    )
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    assert_exactly_once(new.rows(), first + second)
    assert_shard_order(new.batches())
