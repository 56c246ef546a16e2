"""Value types: message ids, Record, ShardInfo, Checkpoint ordering."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from kinesis_spout.records import (
    Checkpoint,
    Record,
    ShardInfo,
    ShardState,
    message_id,
    parse_message_id,
)
from tracker import SequenceKey

BIG = "49680421444009340628450472579904498805621001059141943298"


def rec(seq: str = "5", sub: int = 0) -> Record:
    return Record(
        "s",
        "shardId-000000000001",
        seq,
        sub,
        "pk",
        b"data",
        datetime(2026, 1, 1, tzinfo=UTC),
        SequenceKey(int(seq), sub),
    )


def test_message_id_round_trip() -> None:
    for key in (SequenceKey(int(BIG)), SequenceKey(int(BIG), 7), SequenceKey(0)):
        mid = message_id("shardId-000000000003", key)
        assert parse_message_id(mid) == (None, "shardId-000000000003", key)
        assert parse_message_id(f"orders/{mid}") == ("orders", "shardId-000000000003", key)
    assert message_id("shardId-1", SequenceKey(12, 0)) == "shardId-1:12"
    assert message_id("shardId-1", SequenceKey(12, 3)) == "shardId-1:12:3"


@pytest.mark.parametrize(
    "bad",
    ["", "shard", ":12", "shard:abc", "shard:1:2:3", "shard:1:x", "shard:-1", "shard:1:-2", "/s:1"],
)
def test_malformed_message_ids_name_the_id(bad: str) -> None:
    with pytest.raises(ValueError, match="malformed message id"):
        parse_message_id(bad)


def test_record_is_frozen_slotted_and_knows_its_id() -> None:
    r = rec(BIG, 2)
    assert r.message_id == f"shardId-000000000001:{BIG}:2"
    assert r.attempt == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.attempt = 2  # type: ignore[misc]
    assert not hasattr(r, "__dict__")
    # MillisBehindLatest is not part of a record's identity.
    assert dataclasses.replace(r, millis_behind_latest=5) == r
    assert dataclasses.replace(r, attempt=2) != r


def test_shard_info_parents_and_closed() -> None:
    assert ShardInfo("a").parents == () and not ShardInfo("a").is_closed
    merged = ShardInfo("c", "a", "b", "1", "9")
    assert merged.parents == ("a", "b") and merged.is_closed


def test_checkpoint_ordering() -> None:
    a = Checkpoint("s", "sh", "10", 0)
    b = Checkpoint("s", "sh", "10", 2)
    c = Checkpoint("s", "sh", "9" + "0" * 3, 0)  # 9000 > 10 numerically, < lexically
    end = Checkpoint("s", "sh", "10", 0, shard_end=True)
    empty = Checkpoint("s", "sh", None)
    assert b.is_after(a) and not a.is_after(b)
    assert c.is_after(b)
    assert end.is_after(c) and not c.is_after(end) and not end.is_after(end)
    assert a.is_after(empty) and not empty.is_after(a)
    assert b.key == SequenceKey(10, 2) and empty.key is None


def test_shard_states_are_the_documented_four() -> None:
    assert [s.value for s in ShardState] == ["waiting", "open", "draining", "ended"]
