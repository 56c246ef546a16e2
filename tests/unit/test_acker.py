"""Acker: Storm's XOR ledger."""

from __future__ import annotations

import random
import tracemalloc
from functools import reduce
from operator import xor

import pytest

from tracker import Acker, AckerEvent, AckerEventKind, AckerStats

COMPLETE, FAILED, TIMED_OUT = (
    AckerEventKind.COMPLETE,
    AckerEventKind.FAILED,
    AckerEventKind.TIMED_OUT,
)


def xor_all(*ids: int) -> int:
    return reduce(xor, ids, 0)


def test_new_id_is_non_zero_64_bit_and_reproducible() -> None:
    a, b = Acker(rng=random.Random(7)), Acker(rng=random.Random(7))
    ids = [a.new_id() for _ in range(1000)]
    assert ids == [b.new_id() for _ in range(1000)]
    assert all(0 < i < 2**64 for i in ids)
    assert len(set(ids)) == len(ids)


def test_new_id_skips_zero() -> None:
    class ZeroFirst(random.Random):
        def __init__(self) -> None:
            super().__init__(0)
            self.calls = 0

        def getrandbits(self, k: int) -> int:
            self.calls += 1
            return 0 if self.calls == 1 else 5

    assert Acker(rng=ZeroFirst()).new_id() == 5


def test_storm_example_tree_completes() -> None:
    acker = Acker(rng=random.Random(1))
    root, a, b = acker.new_id(), acker.new_id(), acker.new_id()
    # The spout sends A to two bolts... here one tuple A; bolt 1 emits B anchored on A.
    assert acker.init(root, a, owner="shard-1:42") is None
    assert acker.update(root, a ^ b) is None  # A acked, B created
    assert acker.ack_val(root) == b
    assert acker.update(root, b) == AckerEvent(root, "shard-1:42", COMPLETE)
    assert len(acker) == 0
    stats = acker.stats
    assert (stats.inits, stats.updates, stats.completed, stats.pending) == (1, 2, 1, 0)


def test_init_with_zero_ack_val_completes_at_once() -> None:
    acker = Acker()
    assert acker.init("r", 0, "o") == AckerEvent("r", "o", COMPLETE)
    assert len(acker) == 0


def test_updates_before_init_are_kept_and_the_init_completes_them() -> None:
    acker = Acker(rng=random.Random(2))
    a, b, c = (acker.new_id() for _ in range(3))
    assert acker.update("r", a ^ b) is None  # the bolt's ack overtook the spout's init
    assert acker.update("r", b) is None  # val reached a, still no owner
    assert acker.update("r", c ^ c) is None
    assert acker.is_open("r")
    assert acker.init("r", a, "owner") == AckerEvent("r", "owner", COMPLETE)
    assert acker.stats.early_updates == 1
    # Ack-val back to 0 before the init: the init completes it, not the update.
    assert acker.update("s", a) is None
    assert acker.update("s", a) is None
    assert acker.init("s", 0, "o2") == AckerEvent("s", "o2", COMPLETE)


def test_fail_reports_the_owner_and_removes_the_root() -> None:
    acker = Acker()
    acker.init("r", 3, "o")
    assert acker.fail("r") == AckerEvent("r", "o", FAILED)
    assert not acker.is_open("r")
    # A late ack from a bolt still processing the failed tree: counted, no event, no entry.
    assert acker.update("r", 3) is None
    assert acker.fail("r") is None
    stats = acker.stats
    assert (stats.failed, stats.unknown_updates, stats.unknown_fails, stats.pending) == (
        1,
        1,
        1,
        0,
    )


def test_fail_before_init_is_reported_by_the_init() -> None:
    acker = Acker()
    assert acker.update("r", 5) is None
    assert acker.fail("r") is None
    assert acker.update("r", 5) is None  # ignored: the tree already failed
    assert acker.init("r", 9, "o") == AckerEvent("r", "o", FAILED)
    assert acker.fail("q") is None  # a fail with nothing else known yet
    assert acker.init("q", 9, "o") == AckerEvent("q", "o", FAILED)
    assert len(acker) == 0


def test_duplicate_inits_are_dropped_and_counted() -> None:
    acker = Acker()
    assert acker.init("r", 6, "o") is None
    assert acker.init("r", 6, "o") is None  # open: dropped (XORing it in would corrupt it)
    assert acker.ack_val("r") == 6
    assert acker.update("r", 6) == AckerEvent("r", "o", COMPLETE)
    assert acker.init("r", 6, "o") is None  # finished: dropped
    assert acker.stats.duplicate_inits == 2
    assert len(acker) == 0


def test_expire_times_out_roots_older_than_the_timeout() -> None:
    acker = Acker(timeout=30.0)
    acker.init("a", 1, "oa", now=0.0)
    acker.init("b", 2, "ob", now=10.0)
    acker.init("c", 4, "oc", now=20.0)
    acker.update("b", 2, now=15.0)  # b completes
    assert acker.expire(30.0) == []
    assert acker.expire(31.0) == [AckerEvent("a", "oa", TIMED_OUT)]
    assert acker.expire(100.0) == [AckerEvent("c", "oc", TIMED_OUT)]
    assert acker.update("c", 4) is None  # late: counted
    stats = acker.stats
    assert (stats.timed_out, stats.completed, stats.unknown_updates) == (2, 1, 1)


def test_timeout_runs_from_the_init_and_orphans_are_dropped_silently() -> None:
    acker = Acker(timeout=10.0)
    acker.update("early", 3, now=0.0)
    acker.update("orphan", 7, now=1.0)  # its init never comes
    acker.init("early", 5, "o", now=8.0)  # the clock restarts at the init: deadline 18
    assert acker.expire(12.0) == []
    assert not acker.is_open("orphan")
    assert acker.stats.orphans_expired == 1
    assert acker.expire(18.5) == [AckerEvent("early", "o", TIMED_OUT)]


def test_expire_without_timeout_is_a_no_op() -> None:
    acker = Acker()
    acker.init("r", 1, "o")
    assert acker.expire(1e12) == []
    assert acker.is_open("r")


def test_timeout_queue_stays_bounded_when_expire_is_never_called() -> None:
    acker = Acker(timeout=5.0, rng=random.Random(3))
    acker.init("stuck", 1, "o", now=0.0)
    for n in range(10_000):
        val = acker.new_id()
        acker.init(n, val, "o", now=float(n))
        acker.update(n, val, now=float(n))
        assert len(acker._tq_at) <= 2 * (len(acker) + 1) + 64
    assert acker.expire(1e9) == [AckerEvent("stuck", "o", TIMED_OUT)]


def test_finished_roots_are_remembered_in_a_bounded_fifo() -> None:
    acker = Acker(remember_finished=2)
    for root in ("a", "b", "c"):
        acker.init(root, 1, "o")
        acker.fail(root)
    assert len(acker._finished) == 2
    assert acker.update("c", 1) is None and not acker.is_open("c")  # remembered: dropped
    assert acker.update("a", 1) is None and acker.is_open("a")  # forgotten: an early entry


def test_stats_snapshot() -> None:
    assert Acker().stats == AckerStats(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1.0}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"rng": 42}, "rng"),
        ({"remember_finished": -1}, "remember_finished"),
    ],
)
def test_constructor_validates_naming_the_argument(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        Acker(**kwargs)  # type: ignore[arg-type]


def test_fixed_bytes_per_root_whatever_the_tree_size() -> None:
    def bytes_per_root(fan_out: int) -> float:
        rng = random.Random(fan_out)
        acker = Acker(rng=rng)
        roots = [acker.new_id() for _ in range(1000)]
        trees = [[acker.new_id() for _ in range(fan_out)] for _ in roots]
        vals = [xor_all(*ids) | 1 for ids in trees]
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for root, val in zip(roots, vals, strict=True):
            acker.init(root, val, "owner")
        for root, ids in zip(roots, trees, strict=True):
            for i in ids:  # every tuple acked with two new children: the tree grows
                acker.update(root, i ^ rng.getrandbits(64) ^ rng.getrandbits(64))
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        return used / len(roots)

    small, big = bytes_per_root(1), bytes_per_root(20)
    assert big < 200
    assert abs(big - small) < 16
