"""Read-ahead and replay against real emulators, without Spark: a replayed
range is exactly what the read-ahead planned, KPL cuts included."""

from __future__ import annotations

import pickle
import time
from typing import Any

import pytest
from streaming_helpers import Row, assert_exactly_once, fill, rid

from kinesis_spout.checkpoint.recorded_read import ShardRange
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.records import Record, ShardPosition, StartPosition
from kinesis_spout.streaming.errors import DataLossError
from kinesis_spout.streaming.shard_reader import ReadAhead, read_fresh, read_range
from kinesis_spout.testing.streams import create_stream, emulator_client

pytestmark = pytest.mark.integration


def keys(records: list[Record]) -> list[Row]:
    return [
        Row(r.shard_id, int(r.sequence_number), r.sub_sequence_number, rid(r.data)) for r in records
    ]


def read_ahead(*args: Any, **kwargs: Any) -> ReadAhead:
    """Where a first read stopped (its records left out)."""
    return read_fresh(*args, **kwargs)[1]


def test_replay_reads_exactly_the_planned_ranges_across_kpl_cuts(
    moto_client: Any, unique_name: str
) -> None:
    create_stream(moto_client, unique_name, 1)
    expected = fill(moto_client, unique_name, 23, "a", aggregates=6, per_aggregate=5)
    expected += fill(moto_client, unique_name, 4, "b")
    api = KinesisApi(moto_client, unique_name)
    (shard,) = [s.shard_id for s in api.list_shards()]

    # Quotas of 7 cut inside aggregates; each step's position feeds the next.
    start = StartPosition()
    after: ShardPosition | None = None
    replayed: list[Record] = []
    cuts = 0
    iterator = None
    while True:
        ahead = read_ahead(api, shard, after, start, 7, fetch=3, iterator=iterator)
        if ahead.position is None:
            assert ahead.idle
            break
        cuts += ahead.position.partial
        rng = ShardRange(shard, after, start, ahead.position)
        # Read each range twice (a replay) with a different page size: same records.
        first = [r for page in read_range(api, rng, fetch=4) for r in page]
        again = [r for page in read_range(api, rng, fetch=10_000) for r in page]
        assert keys(first) == keys(again)
        assert len(first) == ahead.position.count <= 7
        replayed += first
        after, iterator = ahead.position, ahead.next_iterator
    assert cuts >= 1, "the test must cut inside an aggregate"
    assert keys(replayed) == sorted(expected, key=lambda r: (r.seq, r.sub))


def test_planned_records_that_are_gone_are_data_loss(moto_client: Any, unique_name: str) -> None:
    create_stream(moto_client, unique_name, 1)
    fill(moto_client, unique_name, 5, "a")
    api = KinesisApi(moto_client, unique_name)
    (shard,) = [s.shard_id for s in api.list_shards()]
    ahead = read_ahead(api, shard, None, StartPosition(), 100, fetch=100)
    assert ahead.position is not None and ahead.position.count == 5
    # A plan claiming more records than the shard holds up to its end key.
    lying = ShardRange(
        shard, None, StartPosition(), ShardPosition(ahead.position.sequence, 0, count=6)
    )
    with pytest.raises(DataLossError, match="planned 6 records"):
        list(read_range(api, lying, fetch=100))
    # failOnDataLoss=false: what is there, and a warning instead.
    got = [r for p in read_range(api, lying, fetch=100, fail_on_data_loss=False) for r in p]
    assert len(got) == 5


def test_closed_parent_ends_and_keeps_its_last_key(kinesis_mock: Any, unique_name: str) -> None:
    """kinesis-mock closes a split parent (moto never does)."""
    client = emulator_client(kinesis_mock.endpoint_url)
    create_stream(client, unique_name, 1)
    rows = fill(client, unique_name, 6, "a")
    api = KinesisApi(client, unique_name)
    (parent,) = [s.shard_id for s in api.list_shards()]
    ahead = read_ahead(api, parent, None, StartPosition(), 100, fetch=100)
    assert ahead.position is not None and ahead.position.count == 6 and not ahead.position.ended
    _split(client, unique_name, parent)
    ended = read_ahead(api, parent, ahead.position, StartPosition(), 100, fetch=100)
    assert ended.position == ShardPosition(str(rows[-1].seq), 0, ended=True, count=0)


def _split(client: Any, stream: str, shard: str) -> None:
    from kinesis_spout.testing.streams import wait_split

    client.split_shard(StreamName=stream, ShardToSplit=shard, NewStartingHashKey=str(2**127))
    wait_split(client, stream, shard)


# --- the reader's offset methods, called as each PySpark version calls them -----------


def _options(endpoint: str, stream: str, **extra: str) -> Any:
    import tempfile

    from kinesis_spout.streaming.options import parse_options

    extra.setdefault("checkpointStore", f"file://{tempfile.mkdtemp(prefix='ks-source-')}")
    return parse_options(
        {"streamname": stream, "endpointurl": endpoint, **{k.lower(): v for k, v in extra.items()}},
        env={},
    )


def _run_batch(reader: Any, start: dict[str, Any], end: dict[str, Any]) -> list[Row]:
    """What Spark does with a planned batch: pickle the reader and each partition
    to the "executors" and read them there."""
    rows = []
    for partition in reader.partitions(start, end):
        executor = pickle.loads(pickle.dumps(reader))
        for batch in executor.read(pickle.loads(pickle.dumps(partition))):
            for r in batch.to_pylist():
                rows.append(
                    Row(
                        r["shardId"],
                        int(r["sequenceNumber"]),
                        r["subSequenceNumber"],
                        rid(r["data"]),
                    )
                )
    return rows


def _drain(
    reader: Any, start: dict[str, Any], expected: int, latest: Any
) -> tuple[dict[str, Any], list[list[Row]]]:
    batches: list[list[Row]] = []
    deadline = time.monotonic() + 30
    while sum(map(len, batches)) < expected:
        assert time.monotonic() < deadline, f"read {sum(map(len, batches))} of {expected}"
        end = latest(start)
        if end != start:
            batches.append(_run_batch(reader, start, end))
            reader.commit(start)  # Spark commits one batch late
            start = end
    return start, batches


def test_offsets_with_pyspark_4_0_and_4_2_signatures(
    moto_server: Any, moto_client: Any, unique_name: str
) -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from kinesis_spout.streaming.source import KinesisStreamReader

    create_stream(moto_client, unique_name, 2)
    first = fill(moto_client, unique_name, 50, "a", aggregates=4, per_aggregate=3)
    opts = _options(moto_server.endpoint_url, unique_name, maxRecordsPerShard="10")

    # PySpark 4.0: latestOffset() without arguments; the reader tracks the start.
    old = KinesisStreamReader(opts)
    start = old.initialOffset()
    start, batches_a = _drain(old, start, len(first), lambda s: old.latestOffset())
    assert all(
        len([r for r in b if r.shard == s]) <= 10 for b in batches_a for s in {r.shard for r in b}
    )

    # A restart on 4.0: a new offset process learns the start from partitions(x, x).
    second = fill(moto_client, unique_name, 30, "b")
    restarted = KinesisStreamReader(opts)
    assert restarted.partitions(start, start) == []
    start, batches_b = _drain(restarted, start, len(second), lambda s: restarted.latestOffset())

    # PySpark 4.2+: latestOffset(start, limit) with a ReadMaxRows limit.
    third = fill(moto_client, unique_name, 40, "c")
    new = KinesisStreamReader(opts)
    assert new.getDefaultReadLimit().__class__.__name__ == "ReadAllAvailable"
    start, batches_c = _drain(new, start, len(third), lambda s: new.latestOffset(s, ReadMaxRows(7)))
    assert all(len(b) <= 7 for b in batches_c)

    # No new data: a batch finds each shard at its tip (reading nothing); the shards then
    # rest for idle_poll_interval, and latestOffset gives the same offset: no batch.
    probes = 0
    end = new.latestOffset(start, ReadMaxRows(7))
    while end != start:
        assert _run_batch(new, start, end) == [], "records after the drain"
        new.commit(start)
        start, probes = end, probes + 1
        assert probes <= 2, "no new data, yet batches keep coming"
        end = new.latestOffset(start, ReadMaxRows(7))
    got = [r for b in batches_a + batches_b + batches_c for r in b]
    assert_exactly_once(got, first + second + third)


def _wait_until(wall: float) -> None:
    """Wait until this machine's clock (the emulator's too) reads ``wall``."""
    while (left := wall - time.time()) > 0:
        time.sleep(min(left, 0.1))


def test_latest_is_pinned_when_the_query_starts(
    moto_server: Any, moto_client: Any, unique_name: str
) -> None:
    from kinesis_spout.streaming.source import KinesisStreamReader

    create_stream(moto_client, unique_name, 2)
    fill(moto_client, unique_name, 20, "old")
    # The start is the server's time (whole seconds) less a second: the old records
    # are out once the server's clock (moto's is this machine's) is 2 s past them.
    _wait_until(time.time() + 2.05)
    reader = KinesisStreamReader(
        _options(moto_server.endpoint_url, unique_name, initialPosition="latest")
    )
    initial = reader.initialOffset()
    assert initial["start"]["type"] == "AT_TIMESTAMP"
    new = fill(moto_client, unique_name, 15, "new")
    end = reader.latestOffset(initial, None)
    assert end != initial
    first = _run_batch(reader, initial, end)
    # A replay of the first batch gets a fresh initialOffset (a later "now", once the
    # server's second changed), yet reads the same records: the range's start comes
    # from the end offset.
    _wait_until(time.time() + 1.05)
    replay = KinesisStreamReader(reader.options)
    assert replay.initialOffset() != initial
    assert _run_batch(replay, replay.initialOffset(), end) == first
    _, rest = _drain(reader, end, len(new) - len(first), lambda s: reader.latestOffset(s, None))
    assert_exactly_once(first + [r for b in rest for r in b], new)
