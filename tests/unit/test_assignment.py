"""The pure shard assignment function."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis_spout.coordination.assignment import (
    affinity,
    assign_shards,
    moved_shards,
    stream_rotations,
)

shard_ids = st.lists(
    st.integers(0, 10_000).map(lambda i: f"shardId-{i:012d}"), max_size=60, unique=True
)
worker_ids = st.lists(
    st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12),
    min_size=1,
    max_size=9,
    unique=True,
)


SIX = [f"shard-{i}" for i in range(6)]


def test_worked_example_of_the_docs_holds() -> None:
    # docs/checkpoints.md, "Who owns what": w3 dies and w1, w2 keep theirs; w4 joins
    # and takes one shard from w2 and one from w3, w1 keeps both of its own.
    assert assign_shards(SIX, ["w1", "w2", "w3"]) == {
        "w1": ("shard-3", "shard-5"),
        "w2": ("shard-0", "shard-2"),
        "w3": ("shard-1", "shard-4"),
    }
    assert assign_shards(SIX, ["w1", "w2"]) == {
        "w1": ("shard-1", "shard-3", "shard-5"),
        "w2": ("shard-0", "shard-2", "shard-4"),
    }
    assert assign_shards(SIX, ["w1", "w2", "w3", "w4"]) == {
        "w1": ("shard-3", "shard-5"),
        "w2": ("shard-0",),
        "w3": ("shard-4",),
        "w4": ("shard-1", "shard-2"),
    }


def test_two_one_shard_streams_go_to_different_workers() -> None:
    assert stream_rotations([(1, 2), (1, 2)]) == [0, 1]
    assert assign_shards(["shard-0"], ["w1", "w2"], rotation=0) == {"w1": ("shard-0",), "w2": ()}
    assert assign_shards(["shard-0"], ["w1", "w2"], rotation=1) == {"w1": (), "w2": ("shard-0",)}


def test_six_shards_three_workers() -> None:
    shards = [f"shardId-{i:012d}" for i in range(6)]
    got = assign_shards(shards, ["a", "b", "c"])
    assert sorted(s for ss in got.values() for s in ss) == shards
    assert [len(v) for v in got.values()] == [2, 2, 2]


def test_no_workers_no_assignment_and_no_shards_empty_tuples() -> None:
    assert assign_shards(["s1"], []) == {}
    assert assign_shards([], ["b", "a"]) == {"a": (), "b": ()}


def test_affinity_is_stable_across_processes() -> None:
    # A fixed value: a salted hash() would differ between interpreter runs, and
    # workers on different machines must agree.
    assert affinity("w1", "shard-0") == 0x7296CB4A92CD8DC6
    assert affinity("w1", "shard-0") != affinity("w2", "shard-0")


@settings(max_examples=100, deadline=None)
@given(shard_ids, worker_ids)
def test_every_shard_owned_exactly_once_and_balanced(shards: list[str], workers: list[str]) -> None:
    got = assign_shards(shards, workers)
    assert set(got) == set(workers)
    owned = [s for ss in got.values() for s in ss]
    assert sorted(owned) == sorted(shards)  # each exactly once
    counts = [len(v) for v in got.values()]
    assert max(counts) - min(counts) <= 1
    for ss in got.values():
        assert list(ss) == sorted(ss)


@settings(max_examples=100, deadline=None)
@given(shard_ids, worker_ids, st.randoms(use_true_random=False))
def test_same_answer_in_any_order(
    shards: list[str], workers: list[str], rnd: random.Random
) -> None:
    a = assign_shards(shards, workers)
    s2, w2 = list(shards), list(workers)
    rnd.shuffle(s2)
    rnd.shuffle(w2)
    assert assign_shards(s2 + s2[:3], w2 + w2[:1]) == a  # order and duplicates ignored


def test_membership_changes_move_few_other_shards() -> None:
    """Sticky: a join or a leave moves, besides the shards taken or given up,
    about one other shard on average (round-robin would move most of them)."""
    rnd = random.Random(7)
    extra_moves = []
    for _ in range(300):
        shards = [f"shardId-{i:012d}" for i in range(rnd.randint(4, 40))]
        workers = [f"host-{rnd.randint(0, 10**6)}" for _ in range(rnd.randint(2, 8))]
        before = assign_shards(shards, workers)
        gone = rnd.choice(workers)
        after = assign_shards(shards, [w for w in workers if w != gone])
        extra_moves.append(len(moved_shards(before, after) - set(before[gone])))
        joined = assign_shards(shards, [*workers, "newcomer"])
        extra_moves.append(len(moved_shards(before, joined) - set(joined["newcomer"])))
    assert sum(extra_moves) / len(extra_moves) < 2.0


def test_moved_shards() -> None:
    assert moved_shards({"a": ["s1", "s2"]}, {"a": ["s1"], "b": ["s2", "s3"]}) == {"s2"}


# --- several streams: each rotated past the extra shards of the streams before it -----


def assign_streams(
    streams: list[list[str]], workers: list[str]
) -> list[dict[str, tuple[str, ...]]]:
    """What a worker of several streams does: each stream's assignment rotated by
    :func:`stream_rotations` over the (live shards, workers) of every stream."""
    rotations = stream_rotations((len(set(s)), len(set(workers))) for s in streams)
    return [assign_shards(s, workers, r) for s, r in zip(streams, rotations, strict=True)]


def test_two_streams_of_one_shard_go_to_two_workers() -> None:
    shard = ["shardId-000000000000"]  # both streams name their shard alike
    for workers in (["w1", "w2"], ["w2", "w1"], ["host-b", "host-a"]):
        a, b = assign_streams([shard, shard], workers)
        assert {w for w, ss in a.items() if ss} != {w for w, ss in b.items() if ss}


def test_streams_of_2_and_3_shards_over_2_workers() -> None:
    a, b = assign_streams([[f"s{i}" for i in range(2)], [f"s{i}" for i in range(3)]], ["x", "y"])
    assert {w: len(a[w]) + len(b[w]) for w in ("x", "y")} == {"x": 3, "y": 2}
    assert all(a[w] and b[w] for w in ("x", "y"))  # each worker reads both streams


@settings(max_examples=100, deadline=None)
@given(st.lists(shard_ids, min_size=1, max_size=5), worker_ids)
def test_several_streams_balanced_over_the_workers_as_a_whole(
    streams: list[list[str]], workers: list[str]
) -> None:
    got = assign_streams(streams, workers)
    for shards, one in zip(streams, got, strict=True):
        assert sorted(s for ss in one.values() for s in ss) == sorted(shards)
        counts = [len(v) for v in one.values()]
        assert max(counts) - min(counts) <= 1  # each stream balanced
    totals = [sum(len(one[w]) for one in got) for w in workers]
    assert max(totals) - min(totals) <= 1  # and the streams together


def test_no_rotation_is_the_single_stream_assignment_and_rotations_start_at_zero() -> None:
    shards = [f"shardId-{i:012d}" for i in range(5)]
    assert assign_shards(shards, ["a", "b", "c"]) == assign_shards(shards, ["c", "b", "a"], None)
    assert stream_rotations([(5, 3), (1, 3), (4, 0), (2, 3)]) == [0, 2, 3, 3]
    assert stream_rotations([]) == []


def test_rotated_membership_changes_move_few_other_shards() -> None:
    """A rotated stream stays sticky: a leave moves, besides the shards given up, about
    one other shard on average (the workers taking one more may change, not most)."""
    rnd = random.Random(11)
    extra_moves = []
    for _ in range(300):
        shards = [f"shardId-{i:012d}" for i in range(rnd.randint(4, 40))]
        workers = [f"host-{rnd.randint(0, 10**6)}" for _ in range(rnd.randint(2, 8))]
        rotation = rnd.randint(0, 7)
        before = assign_shards(shards, workers, rotation)
        gone = rnd.choice(workers)
        after = assign_shards(shards, [w for w in workers if w != gone], rotation)
        extra_moves.append(len(moved_shards(before, after) - set(before[gone])))
    assert sum(extra_moves) / len(extra_moves) < 2.0
