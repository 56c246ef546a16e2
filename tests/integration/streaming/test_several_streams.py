"""The ``kinesis`` source over several streams (``streamName=a,b``) on local[2] Spark and
moto: each record once with its own stream, restarts reading only what is new, each
stream's checkpoints under its name, and ``maxRecordsPerTrigger`` shared between streams.
"""

from __future__ import annotations

import json
import os
import pickle
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from streaming_helpers import fill, start_query

from kinesis_spout.checkpoint import open_store
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream

pytestmark = [pytest.mark.spark, pytest.mark.integration]


class Got(NamedTuple):
    """One delivered row: its stream, shard, key and payload id."""

    stream: str
    shard: str
    seq: int
    sub: int
    rid: str


class StreamSink:
    """A foreachBatch sink keeping each batch's rows with their ``streamName``, written to
    ``<dir>/batch-<id>.json`` (a batch run again replaces its file: idempotent)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def __call__(self, df: Any, batch_id: int) -> None:
        cols = ("streamName", "shardId", "sequenceNumber", "subSequenceNumber", "data")
        table = df.select(*cols).toArrow()
        rows = [
            [st, sh, int(q), int(u), d.split(b"|", 1)[0].decode()]
            for st, sh, q, u, d in zip(*(table.column(c).to_pylist() for c in cols), strict=True)
        ]
        path = self.directory / f"batch-{batch_id:06d}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, path)

    def batches(self) -> dict[int, list[Got]]:
        out = {}
        for p in sorted(self.directory.glob("batch-*.json")):
            out[int(p.stem.split("-")[1])] = [Got(*r) for r in json.loads(p.read_text())]
        return out

    def rows(self) -> list[Got]:
        return [r for rows in self.batches().values() for r in rows]


def put(client: Any, stream: str, n: int, prefix: str) -> list[Got]:
    return [Got(stream, *r) for r in fill(client, stream, n, prefix)]


def run(
    spark: Any, server: MotoServer, streams: list[str], sink: StreamSink, ck: Path, **o: Any
) -> None:
    """One ``Trigger.AvailableNow`` run of the source over ``streams``, to its end."""
    q = start_query(spark, ",".join(streams), server.endpoint_url, sink, ck, **o)
    q.awaitTermination(180)
    assert q.exception() is None


def assert_once(got: list[Got], expected: list[Got]) -> None:
    dupes = [r for r, c in Counter(got).items() if c > 1]
    assert not dupes, f"{len(dupes)} rows delivered twice, e.g. {dupes[:3]}"
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    assert not missing and not extra, f"missing {missing[:3]}, extra {extra[:3]}"


def test_two_streams_each_record_once_with_its_stream_and_checkpoints_per_stream(
    kinesis_spark: Any, moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    one, three = f"{unique_name}-a", f"{unique_name}-b"
    create_stream(moto_client, one, 1)
    create_stream(moto_client, three, 3)
    first = put(moto_client, one, 70, "a1-") + put(moto_client, three, 150, "b1-")
    store_url = f"file://{tmp_path / 'store'}"
    ck = tmp_path / "ck"
    opts = {"maxRecordsPerShard": 40, "checkpointStore": store_url}

    sink = StreamSink(tmp_path / "sink1")
    run(kinesis_spark, moto_server, [one, three], sink, ck, **opts)
    assert_once(sink.rows(), first)  # each with its own streamName
    assert len(sink.batches()) >= 2  # 70 records of the 1-shard stream: 40 a batch

    second = put(moto_client, one, 25, "a2-") + put(moto_client, three, 35, "b2-")
    sink2 = StreamSink(tmp_path / "sink2")
    run(kinesis_spark, moto_server, [one, three], sink2, ck, **opts)
    assert_once(sink2.rows(), second)  # only the new ones

    # Spark commits a batch when it plans the next: a run that finds nothing new commits
    # the last batch of the run before, so the store then holds every shard's last record.
    sink3 = StreamSink(tmp_path / "sink3")
    run(kinesis_spark, moto_server, [one, three], sink3, ck, **opts)
    assert sink3.rows() == []
    last: dict[tuple[str, str], int] = {}
    for r in first + second:
        last[r.stream, r.shard] = max(last.get((r.stream, r.shard), -1), r.seq)
    store = open_store(store_url, f"spark-{one}-{three}")
    try:
        stored = {
            (stream, shard): int(c.sequence_number or -1)
            for stream in (one, three)
            for shard, c in store.load(stream).items()
        }
    finally:
        store.close()
    assert stored == last
    assert {s for s, _ in stored} == {one, three} and len(stored) == 4


def test_a_small_trigger_total_serves_both_streams_in_every_batch(
    kinesis_spark: Any, moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    small, big = f"{unique_name}-s", f"{unique_name}-b"
    create_stream(moto_client, small, 1)
    create_stream(moto_client, big, 8)
    expected = put(moto_client, small, 16, "s-") + put(moto_client, big, 100, "b-")
    sink = StreamSink(tmp_path / "sink")
    run(
        kinesis_spark,
        moto_server,
        [big, small],
        sink,
        tmp_path / "ck",
        maxRecordsPerTrigger=8,
        checkpointStore=f"file://{tmp_path / 'store'}",
    )
    assert_once(sink.rows(), expected)
    left = Counter(r.stream for r in expected)
    both = 0
    for bid, rows in sorted(sink.batches().items()):
        n = Counter(r.stream for r in rows)
        assert sum(n.values()) <= 8, f"batch {bid} took {n}"
        if left[small] and left[big]:  # both streams had records when the batch began
            both += 1
            assert n[small] == min(4, left[small]), f"batch {bid}: {n} (the 1-shard stream)"
            assert 1 <= n[big] <= 4, f"batch {bid}: {n} (the 8-shard stream)"
        left -= n
    assert both >= 4  # 16 records of the small stream, 4 a batch


def test_a_stream_by_arn_is_read_by_arn_next_to_one_by_name(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """The reader's offset and read methods called in-process as Spark calls them (each
    task pickled to its "executor"): the ARN stream's calls name it by ``StreamARN``."""
    from kinesis_spout.streaming.options import parse_options
    from kinesis_spout.streaming.source import KinesisStreamReader

    named, by_arn = f"{unique_name}-n", f"{unique_name}-r"
    create_stream(moto_client, named, 2)
    create_stream(moto_client, by_arn, 1)
    summary = moto_client.describe_stream_summary(StreamName=by_arn)
    arn = summary["StreamDescriptionSummary"]["StreamARN"]
    expected = put(moto_client, named, 30, "n-") + put(moto_client, by_arn, 20, "r-")
    opts = parse_options(
        {
            "streamname": named,
            "streamarn": arn,
            "endpointurl": moto_server.endpoint_url,
            "checkpointstore": f"file://{tmp_path / 'store'}",
        },
        env={},
    )
    reader = KinesisStreamReader(opts)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert end["version"] == 3 and set(end["streams"]) == {named, by_arn}
    parts = reader.partitions(start, end)
    assert {(p.stream, p.arn) for p in parts} == {(named, None), (by_arn, arn)}
    got = []
    for part in parts:
        executor = pickle.loads(pickle.dumps(reader))
        for batch in executor.read(pickle.loads(pickle.dumps(part))):
            for r in batch.to_pylist():
                rid = r["data"].split(b"|", 1)[0].decode()
                got.append(Got(r["streamName"], r["shardId"], int(r["sequenceNumber"]), 0, rid))
    assert_once(got, expected)
    assert reader.planner.streams.api(by_arn).stream_ref == {"StreamARN": arn}
    reader.stop()
