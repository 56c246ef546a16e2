"""The quarantine's state (pure logic): a shard whose record failed alone fetches and
fails it; a shard's reads halved to find a record that hangs every time."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from kinesis_spout.spark.quarantine import Quarantine

S = ("orders", "shardId-0")
OTHER = ("orders", "shardId-1")
ERR = "micro-batch job 3 ran past its deadline"


def test_a_shard_whose_record_failed_alone_fetches_it_until_it_is_found() -> None:
    q = Quarantine()
    assert q.suspect(S) is None and q.shards == frozenset()
    q.quarantine(S, "MemoryError: worker died")
    assert q.suspect(S) == "MemoryError: worker died" and q.suspect(OTHER) is None
    assert q.shards == {S}
    q.read(S, 0)  # a fetch that did not reach it: still in quarantine
    assert q.suspect(S) is not None
    q.found(S)
    assert q.suspect(S) is None


def test_each_hang_halves_the_next_reads_and_a_lone_hang_is_the_record() -> None:
    h = Quarantine()
    assert h.cap(S) is None
    assert not h.hung(S, 16, ERR)
    assert h.cap(S) == 8
    h.read(S, 8)  # the first half read fine
    assert not h.hung(S, 8, ERR) and h.cap(S) == 4
    assert not h.hung(S, 3, ERR) and h.cap(S) == 1  # a read cut shorter (room, data) halves it
    assert h.hung(S, 1, ERR)  # the record: quarantined
    assert h.suspect(S) == ERR
    h.found(S)
    assert h.cap(S) is None and h.suspect(S) is None


def test_a_hang_that_does_not_come_back_ends_the_search() -> None:
    h = Quarantine()
    h.hung(S, 10, ERR)
    h.read(S, 5)
    assert h.cap(S) == 5
    h.read(S, 5)  # as many records as the hung read held, and no hang
    assert h.cap(S) is None


def test_other_shards_are_not_capped() -> None:
    h = Quarantine()
    h.hung(S, 10, ERR)
    assert h.cap(OTHER) is None
    h.read(OTHER, 100)
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
    h, pos, hangs, failed, read = Quarantine(), 0, 0, [], 0
    while pos < n:
        take = min(limit, h.cap(S) or limit, n - pos)
        if pos <= bad < pos + take:
            hangs += 1
            assert hangs <= 1 + math.floor(math.log2(limit))
            if h.hung(S, take, ERR):
                failed.append(pos)
                h.found(S)
                pos += 1
        else:
            h.read(S, take)
            read += take
            pos += take
    assert failed == [bad] and read == n - 1


def test_a_read_to_the_tip_ends_the_search() -> None:
    h = Quarantine()
    h.hung(S, 10_000, ERR)
    h.hung(S, 5_000, ERR)
    h.read(S, 0, caught_up=True)  # an idle shard: nothing left the hung read could hold
    assert h.cap(S) is None
