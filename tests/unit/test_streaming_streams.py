"""The streaming source over several streams: options, offsets (versions 2 and 3) and the
sharing of ``maxRecordsPerTrigger`` between streams. Pure logic, with a fake shard
listing and the file batch-end store (no Kinesis, no Spark)."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_spout.checkpoint.batch_ends import BatchEnd, PlannedFrom
from kinesis_spout.errors import ConfigError
from kinesis_spout.records import ShardInfo, ShardPosition, StartPosition
from kinesis_spout.streaming.batch_offset import BatchOffset, ShardPlan, StreamsOffset
from kinesis_spout.streaming.errors import OffsetError
from kinesis_spout.streaming.offsets import split_streams
from kinesis_spout.streaming.options import SourceOptions, parse_options
from kinesis_spout.streaming.planner import Planner
from kinesis_spout.streaming.streams import SourceStreams

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/payments"


def parse(**options: str) -> SourceOptions:
    options.setdefault("checkpointStore", "file:///tmp/ks")
    return parse_options({k.lower(): v for k, v in options.items()}, env={})


# ------------------------------------------------------------------ options


def test_several_names_and_arns_are_read_in_the_order_given() -> None:
    o = parse(streamName=" orders, clicks ,", streamARN=ARN)
    assert [(s.name, s.arn) for s in o.streams] == [
        ("orders", None),
        ("clicks", None),
        ("payments", ARN),
    ]
    assert o.stream_name == "orders,clicks,payments"
    assert o.job_name == "spark-orders-clicks-payments"  # the default names them all
    assert parse(streamName="orders").job_name == "spark-orders"  # as before
    assert parse(streamARN=ARN).job_name == "spark-payments"  # keyed by the name


@pytest.mark.parametrize(
    ("options", "field", "value", "says"),
    [
        ({"streamName": "orders,orders"}, "streamName", "orders", "each stream once"),
        ({"streamName": "payments", "streamARN": ARN}, "streamARN", ARN, "each stream once"),
        (
            {"streamARN": ARN.replace("us-east-1", "eu-west-1")},
            "streamARN",
            ARN.replace("us-east-1", "eu-west-1"),
            "region 'us-east-1'",
        ),
        ({"streamName": "orders,bad/name"}, "streamName", "bad/name", "1..128 characters"),
        ({"streamName": ARN}, "streamName", ARN, "ARNs go in streamARN"),
        ({"streamARN": "orders"}, "streamARN", "orders", "names go in streamName"),
        ({"streamARN": "arn:aws:kinesis:x"}, "streamARN", "arn:aws:kinesis:x", "stream/NAME"),
        ({"streamName": " , "}, "streamName", " , ", "this or streamARN is required"),
        (
            {"streamName": ",".join(f"{'s' * 60}{i}" for i in range(3))},
            "jobName",
            None,
            "required with these",
        ),
    ],
)
def test_bad_streams_name_the_option_and_the_value(
    options: dict[str, str], field: str, value: str | None, says: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse(**options)
    assert (info.value.field, info.value.value) == (field, value)
    assert says in str(info.value) and field in str(info.value)


def test_several_streams_with_a_long_default_job_take_a_job_name() -> None:
    o = parse(streamName=",".join(f"{'s' * 60}{i}" for i in range(3)), jobName="billing")
    assert o.job_name == "billing" and len(o.streams) == 3


# ------------------------------------------------------------------ offsets


def pos(seq: int, n: int = 1, ended: bool = False) -> ShardPosition:
    return ShardPosition(str(seq), 0, False, ended, n)


def part(stream: str, shards: dict[str, ShardPlan], **kw: Any) -> BatchOffset:
    return BatchOffset(stream, "billing", 7, StartPosition(), shards, run="r1", **kw)


def test_one_stream_keeps_the_version_2_offset_exactly() -> None:
    one = part("orders", {"s-0": ShardPlan(pos(5, 5), 10)})
    doc = StreamsOffset.of([one]).to_json()
    assert doc == one.to_json() and doc["version"] == 2  # what earlier releases wrote
    assert StreamsOffset.from_json(json.loads(json.dumps(doc))) == StreamsOffset.of([one])


def test_several_streams_round_trip_as_a_canonical_version_3_offset() -> None:
    cutoff = datetime(2026, 1, 31, 12, tzinfo=UTC)
    orders = part(
        "orders", {"s-1": ShardPlan(None, 4), "s-0": ShardPlan(pos(5, 5, True))}, cutoff=cutoff
    )
    payments = part("payments", {"s-0": ShardPlan(None, 6, ("s-9",))}, cutoff=cutoff)
    offset = StreamsOffset.of([payments, orders])
    doc = offset.to_json()
    assert doc == {
        "version": 3,
        "job": "billing",
        "batch": 7,
        "run": "r1",
        "cutoff": "2026-01-31T12:00:00+00:00",
        "streams": {
            "orders": {
                "start": {"type": "TRIM_HORIZON"},
                "shards": {"s-0": pos(5, 5, True).to_json(), "s-1": {"q": 4}},
            },
            "payments": {
                "start": {"type": "TRIM_HORIZON"},
                "shards": {"s-0": {"q": 6, "parents": ["s-9"]}},
            },
        },
    }
    assert list(doc["streams"]) == ["orders", "payments"]
    back = StreamsOffset.from_json(json.loads(json.dumps(doc)))
    assert back == offset and back.to_json() == doc
    assert (back.batch, back.run, back.cutoff, back.streams) == (
        7,
        "r1",
        cutoff,
        ["orders", "payments"],
    )


def test_a_version_2_reader_refuses_a_version_3_offset_naming_it() -> None:
    doc = StreamsOffset.of([part("a", {}), part("b", {})]).to_json()
    with pytest.raises(OffsetError, match="version 3 is not supported"):
        BatchOffset.from_json(doc)  # what a one-stream reader parses with


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["streams"].pop("b"), "two or more streams"),
        (lambda d: d["streams"]["a"].update(stream="x"), "offset of stream 'a' must be"),
        (lambda d: d["streams"]["b"]["shards"].update({"s": {"q": -1}}), "offset of b/s"),
        (lambda d: d.pop("job"), "'job'"),
    ],
)
def test_a_bad_version_3_offset_is_named(change: Any, message: str) -> None:
    doc = StreamsOffset.of([part("a", {}), part("b", {})]).to_json()
    change(doc)
    with pytest.raises(OffsetError, match=message):
        StreamsOffset.from_json(doc)


def test_the_parts_of_one_offset_are_of_one_batch() -> None:
    with pytest.raises(OffsetError, match="differ in job, batch, run or cutoff"):
        StreamsOffset.of([part("a", {}), dataclasses.replace(part("b", {}), batch=8)])


# ------------------------------------------------------------------ sharing a trigger's total


def test_streams_get_equal_shares_whatever_their_shard_counts() -> None:
    assert split_streams({"one": 1 * 100, "many": 64 * 100}, 10) == {"one": 5, "many": 5}
    assert split_streams({"a": 100, "b": 100, "c": 100}, 10) == {"a": 4, "b": 3, "c": 3}
    assert split_streams({"a": 100, "b": 100}, None) == {"a": None, "b": None}


def test_what_a_stream_cannot_take_goes_to_the_others() -> None:
    assert split_streams({"a": 100, "b": 100, "c": 2}, 10) == {"a": 5, "b": 3, "c": 2}
    assert split_streams({"resting": 0, "b": 100}, 10) == {"resting": 0, "b": 10}
    assert split_streams({"a": 3, "b": 4}, 100) == {"a": 3, "b": 4}


def test_the_remainder_rotates_so_no_stream_starves() -> None:
    served: list[str] = []
    for turn in range(4):
        served += [s for s, n in split_streams({"a": 9, "b": 9, "c": 9}, 1, turn).items() if n]
    assert served == ["a", "b", "c", "a"]


@given(
    st.dictionaries(st.text(min_size=1, max_size=3), st.integers(0, 50), max_size=6),
    st.integers(0, 200),
    st.integers(0, 10),
)
def test_shares_never_exceed_capacity_and_use_all_they_can(
    capacity: dict[str, int], total: int, turn: int
) -> None:
    shares = split_streams(capacity, total, turn)
    assert set(shares) == set(capacity)
    assert all(0 <= (shares[s] or 0) <= capacity[s] for s in capacity)
    assert sum(v or 0 for v in shares.values()) == min(total, sum(capacity.values()))
    fair = total // max(1, len(capacity))
    assert all((shares[s] or 0) >= min(fair, capacity[s]) for s in capacity)


# ------------------------------------------------------------------ planning two streams


class FakeApi:
    def __init__(self, name: str, shards: int) -> None:
        self.stream_name = name
        self.shards = [ShardInfo(f"shardId-{i:012d}") for i in range(shards)]

    def list_shards(self) -> list[ShardInfo]:
        return self.shards

    def check_stream(self) -> str:
        return "ACTIVE"


def planner(tmp_path: Path, shards: dict[str, int], **options: str) -> Planner:
    opts = parse_options(
        {
            "streamname": ",".join(shards),
            "checkpointstore": f"file://{tmp_path}",
            **{k.lower(): v for k, v in options.items()},
        },
        env={},
    )
    opts = dataclasses.replace(opts, shard_list_interval=0.0)
    apis = {name: FakeApi(name, n) for name, n in shards.items()}
    return Planner(opts, streams=SourceStreams(opts, apis))  # type: ignore[arg-type]


def run(p: Planner, offset: StreamsOffset) -> None:
    """Every planned read takes its whole quota (as a busy stream's tasks would)."""
    for name, off in offset.parts.items():
        store = p.streams.store(name)
        for shard, plan in off.reads.items():
            n = (plan.position.count if plan.position else 0) + plan.quota
            end = BatchEnd(pos(n, n), at=time.time())
            end = dataclasses.replace(end, planned=PlannedFrom.of(off.run, plan, off.start))
            store.record(off.run, off.batch, shard, end)


def test_a_one_shard_stream_shares_every_batch_with_a_many_shard_stream(tmp_path: Path) -> None:
    p = planner(tmp_path, {"small": 1, "big": 16}, maxRecordsPerShard="100")
    offset = p.initial_offset()
    assert offset.to_json()["version"] == 3 and offset.streams == ["big", "small"]
    big_shards: set[str] = set()
    for batch in range(1, 15):
        offset = p.latest(offset.to_json(), 6)  # a ReadMaxRows(6) limit
        quotas = {n: sum(pl.quota for pl in o.reads.values()) for n, o in offset.parts.items()}
        assert offset.batch == batch and quotas == {"small": 3, "big": 3}
        big_shards |= set(offset.parts["big"].reads)
        run(p, offset)
    assert len(big_shards) == 16  # within the big stream, its part rotates over its shards
    p.commit(offset)  # each stream's checkpoints under its own name
    from kinesis_spout.checkpoint import open_store

    store = open_store(f"file://{tmp_path}", "spark-small-big")
    try:
        assert store.load("small")["shardId-000000000000"].sequence_number == str(
            3 * 14
        )  # after the committed batch 14
        assert set(store.load("big")) <= big_shards
    finally:
        store.close()


def test_without_a_limit_each_shard_of_each_stream_takes_its_own_quota(tmp_path: Path) -> None:
    p = planner(tmp_path, {"a": 1, "b": 3}, maxRecordsPerShard="7")
    first = p.latest(p.initial_offset().to_json(), None)
    assert {n: list(o.reads.values()) for n, o in first.parts.items()} == {
        "a": [ShardPlan(None, 7)],
        "b": [ShardPlan(None, 7)] * 3,
    }


def test_a_resting_streams_share_goes_to_the_other(tmp_path: Path) -> None:
    p = planner(tmp_path, {"a": 1, "b": 2}, maxRecordsPerShard="50")
    first = p.latest(p.initial_offset().to_json(), 10)
    a = first.parts["a"]
    plan = a.reads["shardId-000000000000"]
    caught_up = BatchEnd(
        None, caught_up=True, at=time.time(), planned=PlannedFrom.of(a.run, plan, a.start)
    )
    p.streams.store("a").record(a.run, 1, "shardId-000000000000", caught_up)  # a is at its tip
    b = first.parts["b"]
    for shard, bplan in b.reads.items():
        done = BatchEnd(pos(5, 5), at=time.time(), planned=PlannedFrom.of(b.run, bplan, b.start))
        p.streams.store("b").record(b.run, 1, shard, done)
    second = p.latest(first.to_json(), 10)
    assert second.parts["a"].reads == {}
    assert sum(x.quota for x in second.parts["b"].reads.values()) == 10


def test_an_offset_of_other_streams_is_refused_naming_both(tmp_path: Path) -> None:
    p = planner(tmp_path, {"a": 1, "b": 1})
    one = planner(tmp_path / "one", {"a": 1})
    with pytest.raises(OffsetError, match=r"offsets of stream 'a'.*reads streams 'a', 'b'"):
        p.parse(one.initial_offset().to_json())
    with pytest.raises(OffsetError, match=r"offsets of streams 'a', 'b'.*reads stream 'a'"):
        one.parse(p.initial_offset().to_json())


def test_progress_of_several_streams_keys_shards_by_stream() -> None:
    from kinesis_spout.streaming.progress import kinesis_progress

    a = part("a", {"s-0": ShardPlan(pos(5, 5), 3)})
    b = part("b", {"s-0": ShardPlan(None, 2), "s-1": ShardPlan(pos(9))})
    end = json.dumps(StreamsOffset.of([a, b]).to_json())
    report = {"id": "q", "batchId": 4, "sources": [{"endOffset": end, "numInputRows": 5}]}
    (p,) = kinesis_progress(report)
    assert (p.stream, p.job, p.plan, p.num_input_rows) == ("a,b", "billing", 7, 5)
    assert p.quotas == {"a/s-0": 3, "b/s-0": 2}
    assert p.after == {"a/s-0": "5", "b/s-0": None}
    (one,) = kinesis_progress({**report, "sources": [{"endOffset": json.dumps(a.to_json())}]})
    assert (one.stream, one.quotas) == ("a", {"s-0": 3})  # one stream: as before
