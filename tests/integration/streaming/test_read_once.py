"""Each record is read once, on the executors, and every attempt of a batch
returns the same records (moto's server behind the fault proxy, which counts
the records every GetRecords answer carried)."""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from streaming_helpers import BatchSink, Row, assert_exactly_once, fill, rid, start_query

from devkit.faultproxy import FaultProxy
from kinesis_spout.checkpoint.file_batch_ends import FileBatchEnds
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.streaming.executor_read import read_batch_shard
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_a_query_fetches_each_record_once(
    kinesis_spark: Any, moto_server: MotoServer, moto_client: Any, stream: str, tmp_path: Path
) -> None:
    expected = fill(moto_client, stream, 600, "a", aggregates=20, per_aggregate=5)
    sink = BatchSink(tmp_path / "sink")
    with FaultProxy(moto_server.endpoint_url) as proxy:
        q = start_query(
            kinesis_spark, stream, proxy.endpoint_url, sink, tmp_path / "ck", maxRecordsPerShard=70
        )
        q.awaitTermination(120)
        fetched = proxy.records_returned
        calls = proxy.requests.get("GetRecords", 0)
    assert q.exception() is None
    assert_exactly_once(sink.rows(), expected)
    batches = len(sink.batches())
    assert batches >= 3  # several batches per shard
    # each record once; a KPL aggregate cut by a batch's quota is fetched again by the
    # next batch (its other user records): at most one per shard and batch
    assert 620 <= fetched <= 620 + 4 * batches, f"{fetched} Kinesis records fetched for 620"
    assert calls >= 4
    batches_dir = Path(f"{tmp_path / 'ck'}.store") / f"spark-{stream}" / f"{stream}.batches"
    (run_dir,) = batches_dir.iterdir()  # one run: this checkpoint location
    kept = [d for d in run_dir.iterdir() if d.name.isdigit()]
    assert len(kept) <= 2, "batch-end records of committed batches stay"


def _reader(endpoint: str, stream: str, store: Path, **extra: str) -> Any:
    from kinesis_spout.streaming.options import parse_options
    from kinesis_spout.streaming.source import KinesisStreamReader

    opts = parse_options(
        {
            "streamname": stream,
            "endpointurl": endpoint,
            "checkpointstore": f"file://{store}",
            **{k.lower(): v for k, v in extra.items()},
        },
        env={},
    )
    return KinesisStreamReader(opts)


def _read(reader: Any, partition: Any) -> list[Row]:
    executor = pickle.loads(pickle.dumps(reader))  # what Spark ships to an executor
    rows = []
    for batch in executor.read(pickle.loads(pickle.dumps(partition))):
        for r in batch.to_pylist():
            rows.append(
                Row(r["shardId"], int(r["sequenceNumber"]), r["subSequenceNumber"], rid(r["data"]))
            )
    return rows


@contextmanager
def _one_shard(
    moto_server: MotoServer, moto_client: Any, name: str, store: Path, per_shard: int
) -> Iterator[tuple[FaultProxy, Any, list[Row]]]:
    """A one-shard stream of 30 records, the proxy that counts what moto answers, and a
    reader through it taking ``per_shard`` records a batch."""
    create_stream(moto_client, name, 1)
    first = fill(moto_client, name, 30, "a")
    with FaultProxy(moto_server.endpoint_url) as proxy:
        reader = _reader(proxy.endpoint_url, name, store, maxRecordsPerShard=str(per_shard))
        yield proxy, reader, first


def test_a_task_run_again_returns_the_recorded_range_fetching_it_once_more(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    with _one_shard(moto_server, moto_client, unique_name, tmp_path / "store", 100) as (
        proxy,
        reader,
        first,
    ):
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)
        (partition,) = reader.partitions(start, end)
        assert proxy.records_returned == 0, "planning fetched records"
        got = _read(reader, partition)
        assert sorted(got) == sorted(first) and proxy.records_returned == 30
        fill(moto_client, unique_name, 20, "late")  # arrives before the retry
        again = _read(reader, partition)  # a lost executor: Spark runs the task again
        assert again == got, "a retried task must return the same records"
        assert proxy.records_returned == 60  # once per attempt


def test_the_next_batch_goes_on_from_the_iterator_the_batch_before_recorded(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    with _one_shard(moto_server, moto_client, unique_name, tmp_path / "store", 10) as (
        proxy,
        reader,
        first,
    ):
        offsets = [reader.initialOffset()]
        got, opened = [], []
        for _ in range(3):
            offsets.append(reader.latestOffset(offsets[-1], None))
            (partition,) = reader.partitions(offsets[-2], offsets[-1])
            before = proxy.requests.get("GetShardIterator", 0)
            got.append(_read(reader, partition))
            opened.append(proxy.requests.get("GetShardIterator", 0) - before)
            assert (partition.iterator is None) == (len(got) == 1)
    assert [r for rows in got for r in rows] == first
    assert opened == [1, 0, 0]  # batches 2 and 3 go on from the recorded iterator


class LateCheck(FileBatchEnds):
    """A store whose first lookup misses: the attempt reads as if it came first."""

    misses = 0

    def get(self, run: str, batch: int, shard: str) -> Any:
        if self.misses:
            self.misses -= 1
            return None
        return super().get(run, batch, shard)


def test_two_attempts_reading_at_once_return_the_first_recorded_range(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 1)
    fill(moto_client, unique_name, 10, "a")
    reader = _reader(moto_server.endpoint_url, unique_name, tmp_path / "store")
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    (p,) = reader.partitions(start, end)
    fill(moto_client, unique_name, 15, "b")
    # Another attempt (a speculative copy) finished first: it recorded the first 10.
    store = LateCheck(str(tmp_path / "store"), reader.options.job_name, unique_name)
    early = store.record(p.run, p.batch, p.shard_id, _end_after(moto_server, unique_name, p, 10))
    store.misses = 1  # ... after this attempt looked
    api = KinesisApi(make_client(moto_server.endpoint_url), unique_name)
    pages = read_batch_shard(api, store, p.batch, p.shard_id, p.plan, p.start, run=p.run, fetch=100)
    rows = [r for page in pages for r in page]  # this attempt read 25, then lost the race
    assert len(rows) == early.count == 10
    assert rows[-1].key == early.position.key  # type: ignore[union-attr]


def _end_after(moto: MotoServer, stream: str, p: Any, n: int) -> Any:
    from kinesis_spout.checkpoint.batch_ends import BatchEnd, PlannedFrom
    from kinesis_spout.streaming.shard_reader import read_fresh

    api = KinesisApi(make_client(moto.endpoint_url), stream)
    _, ahead = read_fresh(api, p.shard_id, p.plan.position, p.start, n, fetch=n)
    return BatchEnd(ahead.position, at=time.time(), planned=PlannedFrom.of(p.run, p.plan, p.start))


def test_a_corrupt_batch_end_record_fails_the_query_naming_it(
    kinesis_spark: Any, moto_server: MotoServer, moto_client: Any, stream: str, tmp_path: Path
) -> None:
    fill(moto_client, stream, 200, "a")
    reader = _reader(moto_server.endpoint_url, stream, tmp_path / "store")
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    for p in reader.partitions(start, end):
        _read(reader, p)
    store = reader.planner.streams.store(stream)
    victim = Path(store.where(end["run"], end["batch"], "shardId-000000000001"))
    victim.write_text("{broken")
    fresh = _reader(moto_server.endpoint_url, stream, tmp_path / "store")  # a restarted driver
    with pytest.raises(Exception, match=f"corrupt batch-end record at {victim}"):
        fresh.latestOffset(end, None)
    victim.unlink()  # removed by hand: the shard is read again from where the batch began
    before = fresh.planner.parse(end).parts[stream].shards
    after = fresh.planner.parse(fresh.latestOffset(end, None)).parts[stream].shards
    assert after["shardId-000000000001"].position == before["shardId-000000000001"].position
    assert after["shardId-000000000000"].position != before["shardId-000000000000"].position
