"""Helpers of the streaming-source tests: streams with known content and an
idempotent sink by batch id (the pattern docs/streaming-source.md recommends)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

from aws_kinesis_agg.aggregator import RecordAggregator

from kinesis_spout.testing.streams import make_payloads, put_records


class Row(NamedTuple):
    """One user record: where it is and its unique id (the payload's prefix)."""

    shard: str
    seq: int
    sub: int
    rid: str


def rid(data: bytes) -> str:
    return data.split(b"|", 1)[0].decode()


def fill(
    client: Any, stream: str, n: int, prefix: str, *, aggregates: int = 0, per_aggregate: int = 5
) -> list[Row]:
    """Put ``n`` plain records and ``aggregates`` KPL aggregates of
    ``per_aggregate`` user records each; return every user record."""
    items = make_payloads(n, prefix=prefix)
    out = [
        Row(s, int(q), 0, rid(d))
        for (s, q), (_, d) in zip(put_records(client, stream, items), items, strict=True)
    ]
    agg_items: list[tuple[str, bytes]] = []
    users: list[list[bytes]] = []
    for a in range(aggregates):
        agg = RecordAggregator()
        datas = [f"{prefix}k{a:04d}.{i}|".encode() + b"y" * 50 for i in range(per_aggregate)]
        for i, d in enumerate(datas):
            agg.add_user_record(f"apk-{a}-{i}", d)
        record = agg.clear_and_get()
        pk, _, data = record.get_contents()
        agg_items.append((pk, data))
        users.append(datas)
    for (s, q), datas in zip(put_records(client, stream, agg_items), users, strict=True):
        out.extend(Row(s, int(q), i, rid(d)) for i, d in enumerate(datas))
    return out


class BatchSink:
    """A foreachBatch sink that writes each batch to ``<dir>/batch-<id>.json``,
    replacing an earlier attempt of the same batch: idempotent by batch id.

    ``fail_in_batch``: raise after writing half of that batch (once), as a
    crash in the middle of the batch would.
    """

    def __init__(self, directory: Path, fail_in_batch: int | None = None) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.fail_in_batch = fail_in_batch
        self.attempts: list[tuple[int, list[Row]]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        df = df.persist()  # one read of Kinesis for the two actions below
        try:
            table = df.select("shardId", "sequenceNumber", "subSequenceNumber", "data").toArrow()
            rows = [
                Row(s, int(q), int(u), rid(d))
                for s, q, u, d in zip(*(table.column(i).to_pylist() for i in range(4)), strict=True)
            ]
            self.check_columns(df, len(rows))
        finally:
            df.unpersist()
        self.attempts.append((batch_id, rows))
        path = self.directory / f"batch-{batch_id:06d}.json"
        body = json.dumps([list(r) for r in rows])
        if batch_id == self.fail_in_batch:
            self.fail_in_batch = None
            path.write_text(body[: len(body) // 2])  # a torn write, then the crash
            raise RuntimeError(f"simulated crash in batch {batch_id}")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(body)
        os.replace(tmp, path)

    @staticmethod
    def check_columns(df: Any, n: int) -> None:
        if n == 0:
            return
        first = df.limit(1).collect()[0]
        assert first.streamName and first.partitionKey
        assert first.approximateArrivalTimestamp is not None

    def batches(self) -> dict[int, list[Row]]:
        out = {}
        for p in sorted(self.directory.glob("batch-*.json")):
            out[int(p.stem.split("-")[1])] = [Row(*r) for r in json.loads(p.read_text())]
        return out

    def rows(self) -> list[Row]:
        return [r for rows in self.batches().values() for r in rows]


def assert_exactly_once(got: list[Row], expected: list[Row]) -> None:
    dupes = [r for r, c in Counter(got).items() if c > 1]
    assert not dupes, f"{len(dupes)} records delivered twice, e.g. {dupes[:3]}"
    missing = set(expected) - set(got)
    extra = set(got) - set(expected)
    assert not missing, f"{len(missing)} records missing, e.g. {sorted(missing)[:3]}"
    assert not extra, f"{len(extra)} unexpected records, e.g. {sorted(extra)[:3]}"


def assert_shard_order(batches: dict[int, list[Row]]) -> None:
    """Within each shard, batches follow each other in sequence order."""
    last: dict[str, tuple[int, int]] = {}
    for bid in sorted(batches):
        per_shard: dict[str, list[tuple[int, int]]] = {}
        for r in batches[bid]:
            per_shard.setdefault(r.shard, []).append((r.seq, r.sub))
        for shard, keys in per_shard.items():
            assert min(keys) > last.get(shard, (-1, -1)), f"batch {bid} goes back in {shard}"
            last[shard] = max(keys)


def start_query(
    spark: Any,
    stream: str,
    endpoint: str,
    sink: BatchSink,
    checkpoint: Path,
    *,
    trigger: dict[str, Any] | None = None,
    **options: Any,
) -> Any:
    """Start ``readStream.format("kinesis")`` into ``sink`` (availableNow by default;
    the checkpoint store, unless given, is a directory next to the checkpoint location)."""
    options.setdefault("checkpointStore", f"file://{checkpoint}.store")
    reader = (
        spark.readStream.format("kinesis")
        .option("streamName", stream)
        .option("endpointUrl", endpoint)
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    writer = (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**(trigger or {"availableNow": True}))
    )
    return writer.start()
