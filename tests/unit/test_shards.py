"""ShardMap lineage and the shard lifecycle transitions."""

from __future__ import annotations

import itertools

import pytest

from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.kinesis.shards import ShardMap, check_transition
from kinesis_spout.records import ShardInfo, ShardState


def sid(i: int) -> str:
    return f"shardId-{i:012d}"


def test_update_returns_new_shards_in_number_order() -> None:
    m = ShardMap()
    new = m.update([ShardInfo(sid(10)), ShardInfo(sid(2)), ShardInfo(sid(1))])
    assert [s.shard_id for s in new] == [sid(1), sid(2), sid(10)]
    assert m.update([ShardInfo(sid(1)), ShardInfo(sid(3))]) == [ShardInfo(sid(3))]
    assert m.ids() == [sid(1), sid(2), sid(3), sid(10)]
    assert len(m) == 4 and sid(3) in m and "nope" not in m


def test_split_children_wait_for_their_parent() -> None:
    m = ShardMap([ShardInfo(sid(0)), ShardInfo(sid(1), sid(0)), ShardInfo(sid(2), sid(0))])
    assert m.parents_ended(sid(0))
    assert not m.parents_ended(sid(1)) and m.pending_parents(sid(2)) == (sid(0),)
    assert m.children(sid(0)) == [sid(1), sid(2)]
    m.mark_ended(sid(0))
    assert m.parents_ended(sid(1)) and m.parents_ended(sid(2))


def test_merge_child_waits_for_both_parents() -> None:
    m = ShardMap(
        [ShardInfo(sid(0)), ShardInfo(sid(1)), ShardInfo(sid(2), sid(0), sid(1))],
    )
    assert m.pending_parents(sid(2)) == (sid(0), sid(1))
    m.mark_ended(sid(1))
    assert m.pending_parents(sid(2)) == (sid(0),)
    m.mark_ended(sid(0))
    assert m.parents_ended(sid(2))


def test_a_parent_no_longer_listed_counts_as_ended() -> None:
    """Trimmed after the retention period: nothing left to read in it."""
    m = ShardMap([ShardInfo(sid(5), sid(1), sid(2)), ShardInfo(sid(2))])
    assert m.pending_parents(sid(5)) == (sid(2),)
    assert m.has_known_parent(sid(5))
    assert not ShardMap([ShardInfo(sid(5), sid(1))]).has_known_parent(sid(5))


def test_children_from_get_records_are_added_and_listing_keeps_lineage() -> None:
    m = ShardMap([ShardInfo(sid(0))])
    added = m.add_children([ShardInfo(sid(1), sid(0)), ShardInfo(sid(0))])
    assert added == [ShardInfo(sid(1), sid(0))]
    # A later ListShards entry without parents does not erase the known lineage.
    m.update([ShardInfo(sid(1), None, None, "100", None)])
    info = m.get(sid(1))
    assert info is not None and info.parent_shard_id == sid(0)
    assert info.starting_sequence_number == "100"


def test_closing_a_listed_shard_updates_its_info() -> None:
    m = ShardMap([ShardInfo(sid(0), starting_sequence_number="1")])
    assert (
        m.update([ShardInfo(sid(0), starting_sequence_number="1", ending_sequence_number="9")])
        == []
    )
    info = m.get(sid(0))
    assert info is not None and info.is_closed


ALLOWED = {
    (ShardState.WAITING, ShardState.OPEN),
    (ShardState.WAITING, ShardState.ENDED),
    (ShardState.OPEN, ShardState.DRAINING),
    (ShardState.OPEN, ShardState.ENDED),
    (ShardState.DRAINING, ShardState.ENDED),
}


@pytest.mark.parametrize(("old", "new"), list(itertools.product(ShardState, ShardState)))
def test_only_documented_transitions_are_allowed(old: ShardState, new: ShardState) -> None:
    if old is new or (old, new) in ALLOWED:
        assert check_transition("s", old, new) is new
    else:
        with pytest.raises(KinesisSpoutError, match=f"{old.value} -> {new.value}"):
            check_transition("s", old, new)
