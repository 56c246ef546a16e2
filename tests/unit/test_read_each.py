""":func:`~kinesis_spout.kinesis.bounded.read_each`: several bounded reads driven
together, each handed back as soon as it ends, the next calls already under way.

Pure scheduling logic: the getters are stand-ins that answer pages of a given size
(a page marks the shard's tip when no page is left), optionally only once a gate opens.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kinesis_spout.kinesis.bounded import BoundedRead, read_each
from kinesis_spout.records import Record, ShardBatch
from tracker import SequenceKey

WAIT = 10.0


class PagedGetter:
    """A shard of ``pages`` pages (their sizes); each poll answers the next one, after
    ``gate`` opens if one is given; ``due``: when its first poll is due."""

    def __init__(self, pages: list[int], gate: threading.Event | None = None, due: float = 0.0):
        self.pages = list(pages)
        self.gate = gate
        self.next_poll_at = due
        self.limit = 0
        self.ended = False
        self.position = None
        self.millis_behind_latest = 0
        self.calls = 0
        self.seq = 0
        self.polled = threading.Event()

    def poll(self, now: float) -> ShardBatch:
        self.polled.set()
        if self.gate is not None:
            assert self.gate.wait(WAIT), "the gate never opened"
        n = self.pages.pop(0)
        self.calls += 1
        records = []
        for _ in range(n):
            self.seq += 1
            key = SequenceKey(self.seq)
            records.append(Record("s", "shard", str(self.seq), 0, "k", b"x", None, key))
        behind = 0 if not self.pages else 1000
        return ShardBatch(records, now, called=True, millis_behind_latest=behind)

    def at_tip_after(self, batch: ShardBatch, asked: int) -> bool:
        return not self.pages

    def close(self) -> None:
        pass


def bounded(getter: PagedGetter, limit: int = 100) -> BoundedRead:
    getter_: Any = getter
    return BoundedRead(getter_, limit, lambda batch: len(batch.records))


def test_each_read_comes_back_as_it_ends_with_the_next_call_already_under_way() -> None:
    """One call at a time: a read with nothing to do comes back first; then the first
    read that ends, once the next shard's call went out (its page not yet taken); the
    rest as each ends. Each read's end counts what it took."""
    gate = threading.Event()
    first, second = PagedGetter([3]), PagedGetter([2, 4], gate)
    reads = [bounded(first), bounded(second), bounded(PagedGetter([5]), limit=0)]
    out = read_each(reads, time.monotonic() + 60, threads=1)
    assert next(out)[0] == 2  # nothing to read: at once
    i, end = next(out)
    assert (i, end.taken, end.caught_up) == (0, 3, True)
    assert second.polled.wait(WAIT)  # its call went out before the first came back
    assert not reads[1].done and reads[1].end.taken == 0  # its page not taken yet
    gate.set()
    i, end = next(out)
    assert (i, end.taken, end.caught_up, second.calls) == (1, 6, True, 2)
    assert list(out) == []


def test_reads_the_deadline_stopped_come_back_last_in_their_order() -> None:
    """A read not due before the deadline is not polled; such reads come back after
    those that ended, not done, in the order of the reads."""
    # the second late read is due first: the order of ``reads`` still holds
    late = [PagedGetter([1], due=time.monotonic() + d) for d in (7200, 3600)]
    now = [PagedGetter([4]), PagedGetter([1, 1])]
    reads = [bounded(late[0]), bounded(now[0]), bounded(late[1]), bounded(now[1])]
    got = [(i, e.taken) for i, e in read_each(reads, time.monotonic() + 5, threads=2)]
    assert sorted(got[:2]) == [(1, 4), (3, 2)] and got[2:] == [(0, 0), (2, 0)]
    assert [g.calls for g in late] == [0, 0]


class SlowGetter(PagedGetter):
    """Its first call returns only once ``until`` (a monotonic time) has passed."""

    def __init__(self, pages: list[int], until: float) -> None:
        super().__init__(pages)
        self.until = until

    def poll(self, now: float) -> ShardBatch:
        while time.monotonic() < self.until:
            time.sleep(0.005)
        return super().poll(now)


def test_every_shard_is_called_once_even_when_the_deadline_passes_first() -> None:
    """One call at a time and a first call that outlasts the deadline: each other shard
    still gets its one call (a plan is a promise to poll its shard: otherwise its
    micro-batch read nothing of it), but no read is called again past the deadline."""
    deadline = time.monotonic() + 0.05
    slow = SlowGetter([2, 2], until=deadline + 0.01)
    rest = [PagedGetter([3]), PagedGetter([1, 5])]
    reads = [bounded(slow), *(bounded(g) for g in rest)]
    got = {i: e for i, e in read_each(reads, deadline, threads=1)}
    assert [g.calls for g in (slow, *rest)] == [1, 1, 1]
    assert {i: e.taken for i, e in got.items()} == {0: 2, 1: 3, 2: 1}
    assert got[1].caught_up and not got[2].caught_up
