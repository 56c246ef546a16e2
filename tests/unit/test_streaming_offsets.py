"""Offsets of the streaming source and batch planning: pure logic, no servers."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_spout.config import InitialPosition
from kinesis_spout.positions import ShardPosition, StartPosition
from kinesis_spout.records import ShardInfo
from kinesis_spout.streaming.errors import OffsetError
from kinesis_spout.streaming.offsets import (
    ShardRange,
    SourceOffset,
    expired_ended,
    plan_ranges,
    ready_shards,
    split_quota,
    vanished,
)

TS = datetime(2026, 1, 31, 12, 0, 0, 123456, tzinfo=UTC)


def pos(seq: int | None, sub: int = 0, **kw: Any) -> ShardPosition:
    return ShardPosition(None if seq is None else str(seq), sub, **kw)


# --- JSON --------------------------------------------------------------------------------

positions = st.one_of(
    st.builds(
        lambda seq, sub, partial, ended, n: ShardPosition(
            str(seq), sub, partial and not ended, ended, n
        ),
        st.integers(0, 10**56),
        st.integers(0, 10_000),
        st.booleans(),
        st.booleans(),
        st.integers(0, 10**6),
    ),
    st.builds(lambda n: ShardPosition(None, 0, False, True, n), st.integers(0, 10)),
)
starts = st.one_of(
    st.just(StartPosition()),
    st.datetimes(
        min_value=datetime(2000, 1, 1), timezones=st.just(timezone(timedelta(hours=-5)))
    ).map(lambda d: StartPosition(InitialPosition.AT_TIMESTAMP, d)),
)
offsets = st.builds(
    SourceOffset,
    st.text("abcXYZ019_.-", min_size=1, max_size=20),
    starts,
    st.dictionaries(st.from_regex(r"shardId-\d{12}", fullmatch=True), positions, max_size=6),
)


@given(offsets)
def test_offset_json_round_trips_and_is_canonical(offset: SourceOffset) -> None:
    text = json.dumps(offset.to_json())
    back = SourceOffset.from_json(json.loads(text))
    assert back.stream_name == offset.stream_name
    assert dict(back.shards) == dict(offset.shards)
    assert back.start.kind is offset.start.kind
    assert back.start.timestamp == offset.start.timestamp
    # Spark compares offsets as strings: re-serialising must give the same text.
    assert json.dumps(back.to_json()) == text


def test_offset_json_shape_is_documented_one() -> None:
    offset = SourceOffset(
        "orders",
        StartPosition(InitialPosition.AT_TIMESTAMP, TS),
        {
            "shardId-000000000001": pos(42, 3, partial=True, count=9),
            "shardId-000000000000": pos(7, count=250),
            "shardId-000000000002": pos(None, ended=True),
        },
    )
    assert offset.to_json() == {
        "version": 1,
        "stream": "orders",
        "start": {"type": "AT_TIMESTAMP", "timestamp": "2026-01-31T12:00:00.123456+00:00"},
        "shards": {
            "shardId-000000000000": {"seq": "7", "sub": 0, "n": 250},
            "shardId-000000000001": {"seq": "42", "sub": 3, "partial": True, "n": 9},
            "shardId-000000000002": {"ended": True, "n": 0},
        },
    }
    assert list(offset.to_json()["shards"]) == sorted(offset.shards)


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ("nope", "must be an object"),
        ({"version": 2, "stream": "s", "start": {"type": "TRIM_HORIZON"}, "shards": {}}, "version"),
        ({"version": 1, "stream": "", "start": {"type": "TRIM_HORIZON"}, "shards": {}}, "stream"),
        ({"version": 1, "stream": "s", "start": {"type": "LATEST"}, "shards": {}}, "start"),
        (
            {
                "version": 1,
                "stream": "s",
                "start": {"type": "AT_TIMESTAMP", "timestamp": "x"},
                "shards": {},
            },
            "timestamp",
        ),
        ({"version": 1, "stream": "s", "start": {"type": "TRIM_HORIZON"}, "shards": []}, "shards"),
        (
            {
                "version": 1,
                "stream": "s",
                "start": {"type": "TRIM_HORIZON"},
                "shards": {"a": {"seq": "-1", "n": 0}},
            },
            "s/a",
        ),
        (
            {
                "version": 1,
                "stream": "s",
                "start": {"type": "TRIM_HORIZON"},
                "shards": {"a": {"seq": "5", "n": 0, "extra": 1}},
            },
            "unknown keys",
        ),
        (
            {
                "version": 1,
                "stream": "s",
                "start": {"type": "TRIM_HORIZON"},
                "shards": {"a": {"n": 0}},
            },
            "must be ended",
        ),
        (
            {
                "version": 1,
                "stream": "s",
                "start": {"type": "TRIM_HORIZON"},
                "shards": {"a": {"seq": "5", "sub": 0, "partial": True, "ended": True, "n": 1}},
            },
            "inside an aggregate",
        ),
    ],
)
def test_bad_offsets_are_rejected_with_a_clear_error(doc: Any, words: str) -> None:
    with pytest.raises(OffsetError, match=words):
        SourceOffset.from_json(doc)


def test_start_position_is_never_latest() -> None:
    with pytest.raises(ValueError, match="never LATEST"):
        StartPosition(InitialPosition.LATEST)
    with pytest.raises(ValueError, match="timestamp"):
        StartPosition(InitialPosition.AT_TIMESTAMP)


def test_position_key_orders_as_integers() -> None:
    assert pos(9).key < pos(10).key  # type: ignore[operator]
    assert pos(10, 1).key > pos(10).key  # type: ignore[operator]
    assert pos(None, ended=True).key is None


# --- resharding: which shards are read -------------------------------------------------


def shard(sid: str, *parents: str, closed: bool = False) -> ShardInfo:
    p = list(parents) + [None, None]
    return ShardInfo(sid, p[0], p[1], "0", "99" if closed else None)


def offset(**shards: ShardPosition) -> SourceOffset:
    return SourceOffset("s", StartPosition(), shards)


def test_children_wait_until_every_listed_parent_ended() -> None:
    listed = [
        shard("p0", closed=True),
        shard("p1", closed=True),
        shard("c0", "p0"),
        shard("m", "p0", "p1"),
    ]
    assert ready_shards(listed, offset()) == ["p0", "p1"]
    assert ready_shards(listed, offset(p0=pos(5))) == ["p0", "p1"]
    # p0 ended: its only child starts; the merge child still waits for p1.
    assert ready_shards(listed, offset(p0=pos(5, ended=True))) == ["c0", "p1"]
    both = offset(p0=pos(5, ended=True), p1=pos(None, ended=True))
    assert ready_shards(listed, both) == ["c0", "m"]


def test_parent_no_longer_listed_counts_as_done() -> None:
    assert ready_shards([shard("c0", "expired-parent")], offset()) == ["c0"]


def test_started_shard_stays_ready_and_ended_one_is_not_read() -> None:
    listed = [shard("a"), shard("b", closed=True)]
    assert ready_shards(listed, offset(a=pos(1), b=pos(3, ended=True))) == ["a"]


def test_vanished_and_expired_shards() -> None:
    listed = [shard("a")]
    start = offset(a=pos(1), gone=pos(4), old=pos(9, ended=True))
    assert vanished(listed, start) == ["gone"]
    assert expired_ended(listed, start) == ["old"]


# --- quotas --------------------------------------------------------------------------------


def test_quota_without_total_is_per_shard() -> None:
    assert split_quota(["a", "b"], 50, None) == {"a": 50, "b": 50}


def test_quota_total_is_shared_and_capped() -> None:
    assert split_quota(["a", "b", "c"], 100, 7) == {"a": 3, "b": 2, "c": 2}
    assert split_quota(["a", "b"], 3, 100) == {"a": 3, "b": 3}
    assert sum(split_quota(["a", "b", "c"], 100, 2).values()) == 2


def test_small_total_rotates_so_no_shard_starves() -> None:
    served = set()
    for turn in range(3):
        served |= set(split_quota(["a", "b", "c"], 100, 1, rotate=turn))
    assert served == {"a", "b", "c"}


@given(
    st.lists(st.text(min_size=1, max_size=3), unique=True, max_size=8),
    st.integers(1, 50),
    st.one_of(st.none(), st.integers(0, 200)),
    st.integers(0, 10),
)
def test_quota_never_exceeds_limits(ids: list[str], per: int, total: int | None, k: int) -> None:
    q = split_quota(ids, per, total, k)
    assert all(1 <= v <= per for v in q.values())
    assert set(q) <= set(ids)
    if total is not None:
        assert sum(q.values()) <= total


# --- partition planning -----------------------------------------------------------------


def test_one_range_per_moved_shard() -> None:
    start = offset(a=pos(10, count=5), b=pos(20, count=5), c=pos(30, ended=True))
    end = start.updated({"a": pos(15, count=5), "d": pos(3, 2, partial=True, count=8)})
    ranges = plan_ranges(start, end)
    assert [r.shard_id for r in ranges] == ["a", "d"]
    a, d = ranges
    assert a.after == pos(10, count=5) and a.last_key == pos(15).key
    assert d.after is None and d.last.partial and d.last_key == pos(3, 2).key


def test_ended_marker_without_records_needs_no_task() -> None:
    start = offset(a=pos(10, count=5))
    end = start.updated({"a": pos(10, ended=True), "b": pos(None, ended=True)})
    assert plan_ranges(start, end) == []


def test_range_start_comes_from_the_end_offset() -> None:
    """A replay of the first batch gets a fresh initialOffset (LATEST pinned to a new
    time): the range must use the start recorded in the end offset."""
    first = SourceOffset("s", StartPosition(InitialPosition.AT_TIMESTAMP, TS), {})
    end = first.updated({"a": pos(4, count=4)})
    later = SourceOffset("s", StartPosition(InitialPosition.AT_TIMESTAMP, TS + timedelta(1)), {})
    (rng,) = plan_ranges(later, end)
    assert rng == ShardRange("a", None, first.start, pos(4, count=4))


def test_backwards_or_foreign_offsets_are_refused() -> None:
    with pytest.raises(OffsetError, match="backwards"):
        plan_ranges(offset(a=pos(10, count=1)), offset(a=pos(9, count=1)))
    with pytest.raises(OffsetError, match="backwards"):
        plan_ranges(offset(a=pos(10, ended=True)), offset(a=pos(11, count=1)))
    other = SourceOffset("t", StartPosition(), {})
    with pytest.raises(OffsetError, match="two streams"):
        plan_ranges(offset(), other)
