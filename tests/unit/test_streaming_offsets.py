"""Offsets of the streaming source and batch planning: pure logic, no servers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_spout.config import InitialPosition
from kinesis_spout.records import ShardPosition, StartPosition
from kinesis_spout.streaming.offsets import split_quota


def pos(seq: int | None, sub: int = 0, **kw: Any) -> ShardPosition:
    return ShardPosition(None if seq is None else str(seq), sub, **kw)


def test_start_position_is_never_latest() -> None:
    with pytest.raises(ValueError, match="never LATEST"):
        StartPosition(InitialPosition.LATEST)
    with pytest.raises(ValueError, match="timestamp"):
        StartPosition(InitialPosition.AT_TIMESTAMP)


def test_position_key_orders_as_integers() -> None:
    assert pos(9).key < pos(10).key  # type: ignore[operator]
    assert pos(10, 1).key > pos(10).key  # type: ignore[operator]
    assert pos(None, ended=True).key is None


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
