"""Every case of the ack table: previous node done/pending/absent x next node done/pending/absent.

A layout is written as a string of node letters, head first: ``p`` a pending
record, ``d`` a done record (it must follow a pending one), ``X`` the record
that gets acked.  Keys are 1, 2, 3, ... in emit order.
"""

from __future__ import annotations

import pytest

from tracker import InflightRecordTracker, SequenceKey


def k(n: int) -> SequenceKey:
    return SequenceKey(n)


def build(layout: str) -> tuple[InflightRecordTracker[str], SequenceKey | None]:
    """Emit one key per letter, then ack the ``d`` ones; returns the tracker and X."""
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=3)
    x: SequenceKey | None = None
    for n, letter in enumerate(layout, start=1):
        assert tracker.emitted(k(n), f"r{n}")
        if letter == "X":
            x = k(n)
    for n, letter in enumerate(layout, start=1):
        if letter == "d":
            assert tracker.ack(k(n))
    return tracker, x


# (layout, nodes after the ack as (key, done), checkpoint after the ack)
CASES = {
    # previous absent: X is the head, so the checkpoint moves.
    ("absent", "absent"): ("X", [], 1),
    ("absent", "pending"): ("Xp", [(2, False)], 1),
    ("absent", "done"): ("Xdp", [(3, False)], 2),
    ("absent", "done, tail"): ("Xd", [], 2),
    # previous pending: the checkpoint cannot move.
    ("pending", "absent"): ("pX", [(1, False), (2, True)], None),
    ("pending", "pending"): ("pXp", [(1, False), (2, True), (3, False)], None),
    ("pending", "done"): ("pXdp", [(1, False), (3, True), (4, False)], None),
    # previous done (so not the head): it is dropped, X or the next done node represents the run.
    ("done", "absent"): ("pdX", [(1, False), (3, True)], None),
    ("done", "pending"): ("pdXp", [(1, False), (3, True), (4, False)], None),
    ("done", "done"): ("pdXdp", [(1, False), (4, True), (5, False)], None),
}


@pytest.mark.parametrize(("prev", "nxt"), list(CASES), ids=[f"{p}-{n}" for p, n in CASES])
def test_ack_table(prev: str, nxt: str) -> None:
    layout, expected_nodes, expected_checkpoint = CASES[(prev, nxt)]
    tracker, x = build(layout)
    assert x is not None
    assert tracker.ack(x)
    nodes = tracker._nodes()  # the collapsed view; also checks the map's layout
    assert nodes == [(k(n), done) for n, done in expected_nodes]
    assert len(tracker) <= 3 * tracker.in_flight + 64  # done runs collapse lazily
    expected = None if expected_checkpoint is None else k(expected_checkpoint)
    assert tracker.checkpoint == expected
    # Earliest/latest: the first pending key and the latest key (checked by _nodes()),
    # and pending() lists exactly the records not done, in emit order.
    assert list(tracker.pending()) == [key for key, done in nodes if not done]
    assert tracker.in_flight == sum(1 for _, done in nodes if not done)
    pending = [key for key, done in nodes if not done]
    assert next(tracker.pending(), None) == (pending[0] if pending else None)  # earliest
    assert tracker.latest == k(len(layout))  # latest


@pytest.mark.parametrize(("prev", "nxt"), list(CASES), ids=[f"{p}-{n}" for p, n in CASES])
def test_ack_table_bulk_path_agrees(prev: str, nxt: str) -> None:
    layout, expected_nodes, expected_checkpoint = CASES[(prev, nxt)]
    tracker, x = build(layout)
    assert x is not None
    assert tracker.ack_many([x]) == 1
    assert tracker._nodes() == [(k(n), done) for n, done in expected_nodes]
    expected = None if expected_checkpoint is None else k(expected_checkpoint)
    assert tracker.checkpoint == expected
    assert list(tracker.pending()) == [k(n) for n, done in expected_nodes if not done]
    assert tracker.latest == k(len(layout))


def test_head_ack_after_collapses_takes_the_whole_done_run() -> None:
    tracker, _ = build("pdddddp")  # done run 2..6 collapses to its last key
    assert tracker._nodes() == [(k(1), False), (k(6), True), (k(7), False)]
    assert tracker.ack(k(1))
    assert tracker.checkpoint == k(6)
    assert tracker._nodes() == [(k(7), False)]
    assert tracker.ack(k(7))
    assert tracker.checkpoint == k(7)
    assert tracker._nodes() == []
    assert len(tracker) == 0


def test_emit_after_the_list_emptied_relinks_head_and_tail() -> None:
    tracker, x = build("X")
    assert x is not None
    tracker.ack(x)
    assert tracker._nodes() == []
    tracker.emitted(k(2))
    tracker.emitted(k(3))
    assert tracker._nodes() == [(k(2), False), (k(3), False)]
    tracker.ack(k(3))
    tracker.emitted(k(4))  # the tail moved on, it was not cleared
    assert tracker._nodes() == [(k(2), False), (k(3), True), (k(4), False)]
    tracker.ack(k(2))
    assert tracker.checkpoint == k(3)
    assert tracker._nodes() == [(k(4), False)]
