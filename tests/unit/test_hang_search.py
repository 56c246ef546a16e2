"""Halving a shard's reads to find a record that hangs every time (pure logic)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from kinesis_spout.spark.read.hangs import HangSearch

S = "shardId-0"


def test_each_hang_halves_the_next_reads_and_a_lone_hang_is_the_record() -> None:
    h = HangSearch()
    assert h.cap(S) is None
    assert not h.hung(S, 16)
    assert h.cap(S) == 8
    h.read(S, 8)  # the first half read fine
    assert not h.hung(S, 8) and h.cap(S) == 4
    assert not h.hung(S, 3) and h.cap(S) == 1  # a read cut shorter (room, data) halves it
    assert h.hung(S, 1)
    h.found(S)
    assert h.cap(S) is None


def test_a_hang_that_does_not_come_back_ends_the_search() -> None:
    h = HangSearch()
    h.hung(S, 10)
    h.read(S, 5)
    assert h.cap(S) == 5
    h.read(S, 5)  # as many records as the hung read held, and no hang
    assert h.cap(S) is None


def test_other_shards_are_not_capped() -> None:
    h = HangSearch()
    h.hung(S, 10)
    assert h.cap("shardId-1") is None
    h.read("shardId-1", 100)
    assert h.cap(S) == 5


@given(
    n=st.integers(1, 300),
    limit=st.integers(1, 100),
    data=st.data(),
)
def test_the_search_finds_the_record_that_hangs_and_fails_nothing_else(
    n: int, limit: int, data: st.DataObject
) -> None:
    """A shard of ``n`` records read ``limit`` at a time, record ``bad`` hanging every
    time: the record failed alone is ``bad``, every other record is read, and it took
    at most 1 + log2(limit) hangs."""
    bad = data.draw(st.integers(0, n - 1))
    h, pos, hangs, failed, read = HangSearch(), 0, 0, [], 0
    while pos < n:
        take = min(limit, h.cap(S) or limit, n - pos)
        if pos <= bad < pos + take:
            hangs += 1
            assert hangs <= 1 + math.floor(math.log2(limit))
            if h.hung(S, take):
                failed.append(pos)
                h.found(S)
                pos += 1
        else:
            h.read(S, take)
            read += take
            pos += take
    assert failed == [bad] and read == n - 1


def test_a_read_to_the_tip_ends_the_search() -> None:
    h = HangSearch()
    h.hung(S, 10_000)
    h.hung(S, 5_000)
    h.read(S, 0, caught_up=True)  # an idle shard: nothing left the hung read could hold
    assert h.cap(S) is None


def test_a_record_that_could_not_be_read_alone_is_read_alone_again() -> None:
    """The one record that hung could not be read on the driver: the shard's next read
    is of one record again, not a whole new search; a read of it that does not hang
    ends the search."""
    search = HangSearch()
    for limit in (16, 8, 4, 2):
        assert not search.hung("s", limit)
    assert search.hung("s", 1)  # found: the planner reads it alone, and cannot
    search.unread("s")
    assert search.cap("s") == 1
    assert search.hung("s", 1)  # it hangs again: found again
    search.unread("s")
    search.read("s", 1)  # this time it did not hang
    assert search.cap("s") is None
