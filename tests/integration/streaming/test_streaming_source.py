"""The ``kinesis`` Structured Streaming source on local[2] Spark and real emulators.

Each query writes through :class:`BatchSink`, a foreachBatch sink idempotent
by batch id, and the sink's content is compared with what was put into the
stream: every record exactly once, batches in shard order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from streaming_helpers import (
    BatchSink,
    Row,
    assert_exactly_once,
    assert_shard_order,
    fill,
    rid,
    start_query,
)

from kinesis_spout.checkpoint import open_store
from kinesis_spout.testing.servers import KinesisMock, MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client, wait_split

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def shard_max(batches: dict[int, list[Row]], upto: int) -> dict[str, tuple[int, int]]:
    """Per shard, the last key delivered in batches ``0..upto``."""
    out: dict[str, tuple[int, int]] = {}
    for bid, rows in batches.items():
        if bid <= upto:
            for r in rows:
                out[r.shard] = max(out.get(r.shard, (-1, -1)), (r.seq, r.sub))
    return out


def mirrored(batches: dict[int, list[Row]], upto: int) -> dict[str, tuple[int, int]]:
    """Per shard, the checkpoint the commits of batches ``0..upto`` leave in the store: the
    last batch end, except one right after an aggregate's first user record (the store
    would read ``(seq, 0)`` as "the whole aggregate is done"), which keeps the one before."""
    aggregates = {(r.shard, r.seq) for rows in batches.values() for r in rows if r.sub > 0}
    out: dict[str, tuple[int, int]] = {}
    for bid in range(upto + 1):
        for shard, key in shard_max(batches, bid).items():
            if not (key[1] == 0 and (shard, key[0]) in aggregates):
                out[shard] = key
    return out


def test_every_record_once_per_batch_and_commits_reach_the_file_store(
    kinesis_spark: Any,
    moto_server: MotoServer,
    moto_client: Any,
    stream: str,
    tmp_path: Path,
) -> None:
    expected = fill(moto_client, stream, 700, "a", aggregates=30, per_aggregate=5)
    store_url = f"file://{tmp_path / 'store'}"
    sink = BatchSink(tmp_path / "sink")
    q = start_query(
        kinesis_spark,
        stream,
        moto_server.endpoint_url,
        sink,
        tmp_path / "ck",
        maxRecordsPerShard=100,
        checkpointStore=store_url,
    )
    q.awaitTermination(120)
    assert q.exception() is None
    batches = sink.batches()
    assert list(batches) == list(range(len(batches))) and len(batches) >= 3
    for rows in batches.values():
        per_shard: dict[str, int] = {}
        for r in rows:
            per_shard[r.shard] = per_shard.get(r.shard, 0) + 1
        assert max(per_shard.values()) <= 100
    assert_exactly_once(sink.rows(), expected)
    assert_shard_order(batches)
    assert any(r.sub > 0 for r in sink.rows()), "KPL aggregates are de-aggregated"

    # commit(end) runs one batch late and never for the last batch: the store
    # holds the end of one of the last two batches, for every shard at once.
    store = open_store(store_url, f"spark-{stream}")
    try:
        stored = {
            s: (int(c.sequence_number or -1), c.sub_sequence_number)
            for s, c in store.load(stream).items()
        }
    finally:
        store.close()
    last = len(batches) - 1
    assert stored in (mirrored(batches, last - 1), mirrored(batches, last - 2))


@pytest.mark.parametrize("kind", ["zk", "dynamodb"])
def test_crash_mid_batch_then_restart_replays_that_batch_exactly(
    kinesis_spark: Any,
    moto_server: MotoServer,
    moto_client: Any,
    stream: str,
    store_url_of: Callable[[str], str],
    tmp_path: Path,
    kind: str,
) -> None:
    """The batch ends the executors record (ZooKeeper, DynamoDB) make the batch re-run
    after the crash read the same records; commits reach the store."""
    first = fill(moto_client, stream, 500, "a", aggregates=10, per_aggregate=4)
    store_url = store_url_of(kind)
    options = {"maxRecordsPerTrigger": 120, "checkpointStore": store_url, "jobName": "orders"}
    sink = BatchSink(tmp_path / "sink", fail_in_batch=2)
    q = start_query(
        kinesis_spark, stream, moto_server.endpoint_url, sink, tmp_path / "ck", **options
    )
    with pytest.raises(Exception, match="simulated crash in batch 2"):
        q.awaitTermination(120)
    crashed = sink.attempts[-1]
    assert crashed[0] == 2
    assert (tmp_path / "sink" / "batch-000002.json").exists()  # the torn write

    second = fill(moto_client, stream, 300, "b")  # arrives while the query is down
    resumed = BatchSink(tmp_path / "sink")
    q = start_query(
        kinesis_spark, stream, moto_server.endpoint_url, resumed, tmp_path / "ck", **options
    )
    q.awaitTermination(120)
    assert q.exception() is None
    # Spark re-runs batch 2 from its offset log: the same records, in the same order.
    assert resumed.attempts[0] == crashed
    assert all(len(rows) <= 120 for _, rows in resumed.attempts)
    batches = resumed.batches()
    assert list(batches) == list(range(len(batches)))
    assert_exactly_once(resumed.rows(), first + second)
    assert_shard_order(batches)

    store = open_store(store_url, "orders")
    try:
        stored = store.load(stream)
    finally:
        store.close()
    assert stored and all(c.owner == "spark-source:orders" for c in stored.values())


class FirstPartitionSink(BatchSink):
    """A :class:`BatchSink` whose batch ``partial`` computes only the batch's first
    partition, as ``df.show()``, ``df.head()`` or ``df.limit(n).collect()`` do when that
    partition has enough rows (Spark runs no task for the others), and keeps only its
    rows: the other shards' reads of that batch never run."""

    def __init__(self, directory: Path, partial: int) -> None:
        super().__init__(directory)
        self.partial = partial
        self.partitions = 0

    def __call__(self, df: Any, batch_id: int) -> None:
        if batch_id != self.partial:
            super().__call__(df, batch_id)
            return
        rdd = df.select("shardId", "sequenceNumber", "subSequenceNumber", "data").rdd
        self.partitions = rdd.getNumPartitions()
        got = df.sparkSession.sparkContext.runJob(rdd, lambda it: [tuple(r) for r in it], [0])
        rows = [Row(s, int(q), int(u), rid(d)) for s, q, u, d in got]
        self.attempts.append((batch_id, rows))
        (self.directory / f"batch-{batch_id:06d}.json").write_text(
            json.dumps([list(r) for r in rows])
        )


def test_a_batch_whose_function_skips_partitions_has_their_shards_read_by_the_next(
    kinesis_spark: Any,
    moto_server: MotoServer,
    moto_client: Any,
    stream: str,
    tmp_path: Path,
) -> None:
    """foreachBatch code that looks at part of a batch (``df.show()``) leaves the reads
    of the partitions Spark did not run unrecorded. Their shards keep their position and
    the next batch reads them: the query goes on, and no record is skipped."""
    expected = fill(moto_client, stream, 200, "a")
    sink = FirstPartitionSink(tmp_path / "sink", partial=0)
    q = start_query(kinesis_spark, stream, moto_server.endpoint_url, sink, tmp_path / "ck")
    q.awaitTermination(120)
    assert q.exception() is None
    batches = sink.batches()
    assert sink.partitions > 1, "batch 0 has partitions that did not run"
    assert {r.shard for r in batches[0]} < {r.shard for r in expected}
    assert len(batches) >= 2 and list(batches) == list(range(len(batches)))
    assert_exactly_once(sink.rows(), expected)
    assert_shard_order(batches)


def test_reshard_mid_query_reads_parents_before_children(
    kinesis_spark: Any, kinesis_mock: KinesisMock, unique_name: str, tmp_path: Path
) -> None:
    """kinesis-mock closes a split parent and reports its children (moto never does)."""
    client = emulator_client(kinesis_mock.endpoint_url)
    create_stream(client, unique_name, 2)
    before = fill(client, unique_name, 60, "a")
    parent = "shardId-000000000000"
    sink = BatchSink(tmp_path / "sink")
    q = start_query(
        kinesis_spark,
        unique_name,
        kinesis_mock.endpoint_url,
        sink,
        tmp_path / "ck",
        trigger={"processingTime": "200 milliseconds"},
        maxRecordsPerShard=8,
    )
    try:
        _wait(lambda: len(sink.batches()) >= 1, "a first batch")
        assert len(sink.rows()) < len(before), (
            "the split must come while the parent has records left"
        )
        client.split_shard(
            StreamName=unique_name, ShardToSplit=parent, NewStartingHashKey=str(2**126)
        )
        wait_split(client, unique_name, parent)
        after = fill(client, unique_name, 40, "b")
        expected = before + after
        _wait(lambda: len(sink.rows()) >= len(expected), "every record", timeout=120)
    finally:
        q.stop()
    assert q.exception() is None
    assert_exactly_once(sink.rows(), expected)
    batches = sink.batches()
    assert_shard_order(batches)
    children = {r.shard for r in after} - {parent, "shardId-000000000001"}
    assert len(children) == 2, f"records should land in both children, got {children}"
    parent_batches = [b for b, rows in batches.items() if any(r.shard == parent for r in rows)]
    child_batches = [b for b, rows in batches.items() if any(r.shard in children for r in rows)]
    assert max(parent_batches) < min(child_batches)
    assert len(parent_batches) >= 2  # the parent was read across batches after the split


def test_wrong_option_fails_at_load_naming_it(kinesis_spark: Any) -> None:
    reader = kinesis_spark.readStream.format("kinesis").option("streamName", "s")
    with pytest.raises(Exception, match="maxRecordsPerShard"):
        reader.option("maxRecordsPerShard", "0").load()
    with pytest.raises(Exception, match="checkpointStore"):
        reader.option("checkpointStore", "memory://").load()


def test_unknown_stream_fails_the_query_clearly(
    kinesis_spark: Any, moto_server: MotoServer, tmp_path: Path
) -> None:
    q = start_query(
        kinesis_spark,
        "no-such-stream",
        moto_server.endpoint_url,
        BatchSink(tmp_path / "s"),
        tmp_path / "ck",
    )
    with pytest.raises(Exception, match="no-such-stream.*not found"):
        q.awaitTermination(60)


def _wait(cond: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_kill_mid_batch_then_restart_no_gap_no_duplicate(
    kinesis_spark: Any,
    moto_server: MotoServer,
    moto_client: Any,
    stream: str,
    tmp_path: Path,
) -> None:
    """SIGKILL a query (its own driver JVM and Python workers) inside batch 1,
    then resume it from the same checkpoint location in another JVM."""
    expected = fill(moto_client, stream, 600, "a")
    options = {"maxRecordsPerShard": 60}
    sink_dir = tmp_path / "sink"
    sink_dir.mkdir()
    child = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("kill_child.py")),
            moto_server.endpoint_url,
            stream,
            str(tmp_path / "ck"),
            str(sink_dir),
            "1",
            json.dumps(options),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "child.log").open("wb"),
        start_new_session=True,
    )
    try:
        _wait(
            lambda: (sink_dir / "inside-1").exists() or child.poll() is not None,
            "the child to reach batch 1",
            timeout=180,
        )
        assert child.poll() is None, (tmp_path / "child.log").read_text()[-3000:]
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    seen_before_kill = int((sink_dir / "inside-1").read_text())
    assert sorted(p.name for p in sink_dir.glob("batch-*")) == [
        "batch-000000.json",
        "batch-000001.json",
    ]

    resumed = BatchSink(sink_dir)
    q = start_query(
        kinesis_spark, stream, moto_server.endpoint_url, resumed, tmp_path / "ck", **options
    )
    q.awaitTermination(120)
    assert q.exception() is None
    assert resumed.attempts[0][0] == 1, "the killed batch runs again first"
    assert len(resumed.attempts[0][1]) == seen_before_kill
    assert_exactly_once(resumed.rows(), expected)
    assert_shard_order(resumed.batches())
