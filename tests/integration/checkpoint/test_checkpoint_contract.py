"""One contract, every real store: the file, ZooKeeper and DynamoDB stores.

Each test runs once per store kind (``store_kind``: "file", "zk", "dynamodb", and
"dynamodb-fenced", the DynamoDB store under its job's lease); DynamoDB is moto's
server over HTTP.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

import pytest

from kinesis_spout.checkpoint import CheckpointStore
from kinesis_spout.errors import CheckpointError, StaleCheckpointError
from kinesis_spout.records import Checkpoint

StoreFactory = Callable[..., CheckpointStore]

pytestmark = pytest.mark.integration

STREAM = "orders"


@pytest.fixture(params=["file", "zk", "dynamodb", "dynamodb-fenced"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


BIG = "49590338271490256608559692538361571095921575989136588898"  # a real 56-digit sequence


def cp(
    seq: str | None, sub: int = 0, shard: str = "shardId-000000000000", **kw: object
) -> Checkpoint:
    return Checkpoint(STREAM, shard, seq, sub, **kw)  # type: ignore[arg-type]


def test_empty_store_loads_nothing(store_factory: StoreFactory) -> None:
    assert store_factory().load(STREAM) == {}


def test_round_trip_keeps_every_field(store_factory: StoreFactory) -> None:
    store = store_factory(owner="worker-a")
    saved = store.save(cp(BIG, 7))
    assert saved.sequence_number == BIG
    assert saved.sub_sequence_number == 7
    assert saved.job_name == store.job_name
    assert saved.owner == "worker-a"
    assert isinstance(saved.updated_at, datetime)
    store.save(cp("5", shard="shardId-000000000001"))

    loaded = store_factory().load(STREAM)
    assert set(loaded) == {"shardId-000000000000", "shardId-000000000001"}
    got = loaded["shardId-000000000000"]
    assert (got.sequence_number, got.sub_sequence_number, got.shard_end) == (BIG, 7, False)
    assert got.owner == "worker-a"
    assert got.updated_at == saved.updated_at
    assert got.key is not None and got.key.sequence == int(BIG)


def test_checkpoint_only_moves_forward(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.save(cp("100", 2))
    # Numeric, not lexical: "99" < "100".
    with pytest.raises(StaleCheckpointError, match="backwards"):
        store.save(cp("99"))
    with pytest.raises(StaleCheckpointError):
        store.save(cp("100", 1))
    assert store.save(cp("100", 2)).sub_sequence_number == 2  # equal: no-op
    store.save(cp("100", 3))
    store.save(cp("1000"))
    assert store.load(STREAM)["shardId-000000000000"].sequence_number == "1000"


def test_equal_save_is_a_no_op(store_factory: StoreFactory) -> None:
    store = store_factory()
    first = store.save(cp("10"))
    again = store.save(cp("10"))
    assert again.updated_at == first.updated_at  # nothing was rewritten


def test_save_many_saves_each_as_save_would_and_keeps_each_refusal_in_its_place(
    store_factory: StoreFactory,
) -> None:
    """A checkpoint round of several shards (``save_many``): each outcome in its place;
    one refused as behind does not stop the others; an equal one is a no-op."""
    store = store_factory()
    store.save(cp("100", shard="shardId-000000000001"))
    store.save(cp("7", shard="shardId-000000000002"))
    out = store.save_many(
        [
            cp("5", shard="shardId-000000000000"),  # new
            cp("99", shard="shardId-000000000001"),  # behind: refused
            cp("7", shard="shardId-000000000002"),  # equal: no-op
            cp("8", shard="shardId-000000000003"),  # new
        ]
    )
    assert [type(o).__name__ for o in out] == [
        "Checkpoint",
        "StaleCheckpointError",
        "Checkpoint",
        "Checkpoint",
    ]
    assert isinstance(out[1], StaleCheckpointError) and "backwards" in str(out[1])
    loaded = store_factory().load(STREAM)
    assert {s: c.sequence_number for s, c in loaded.items()} == {
        "shardId-000000000000": "5",
        "shardId-000000000001": "100",
        "shardId-000000000002": "7",
        "shardId-000000000003": "8",
    }
    assert store.save_many([]) == []


def test_ended_shard_stays_ended(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.save(cp("42"))
    ended = store.mark_ended(STREAM, "shardId-000000000000", "worker-b")
    assert ended.shard_end and ended.sequence_number == "42" and ended.owner == "worker-b"
    with pytest.raises(StaleCheckpointError):
        store.save(cp("43"))
    again = store.mark_ended(STREAM, "shardId-000000000000", "worker-c")
    assert again.shard_end and again.owner == "worker-b"  # idempotent
    loaded = store_factory().load(STREAM)["shardId-000000000000"]
    assert loaded.shard_end and loaded.sequence_number == "42"


def test_mark_ended_without_a_checkpoint(store_factory: StoreFactory) -> None:
    store = store_factory()
    ended = store.mark_ended(STREAM, "shardId-000000000009", "w")
    assert ended.shard_end and ended.sequence_number is None
    assert store.load(STREAM)["shardId-000000000009"].shard_end


def test_save_with_shard_end_and_position(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.save(cp("5"))
    store.save(cp("9", shard_end=True))
    got = store.load(STREAM)["shardId-000000000000"]
    assert got.shard_end and got.sequence_number == "9"


def test_streams_and_jobs_are_separate(store_factory: StoreFactory) -> None:
    a = store_factory(job="job-a")
    b = store_factory(job="job-b")
    a.save(cp("10"))
    a.save(Checkpoint("other-stream", "shardId-000000000000", "3"))
    assert b.load(STREAM) == {}
    b.save(cp("1"))  # job b's own checkpoint, behind job a's: not stale for b
    assert a.load(STREAM)["shardId-000000000000"].sequence_number == "10"
    assert b.load(STREAM)["shardId-000000000000"].sequence_number == "1"
    assert a.load("other-stream")["shardId-000000000000"].sequence_number == "3"


def test_restart_of_the_store(store_factory: StoreFactory) -> None:
    first = store_factory()
    for shard in range(3):
        first.save(cp(str(100 + shard), shard=f"shardId-{shard:012d}"))
    first.mark_ended(STREAM, "shardId-000000000002", "w1")
    first.close()
    with pytest.raises(CheckpointError):
        first.load(STREAM)

    second = store_factory()
    loaded = second.load(STREAM)
    assert {s: c.sequence_number for s, c in loaded.items()} == {
        "shardId-000000000000": "100",
        "shardId-000000000001": "101",
        "shardId-000000000002": "102",
    }
    assert loaded["shardId-000000000002"].shard_end
    second.save(cp("150"))
    assert store_factory().load(STREAM)["shardId-000000000000"].sequence_number == "150"


def test_concurrent_writers_never_move_backwards(store_factory: StoreFactory) -> None:
    """Four stores (as four processes would) race on one shard with interleaved
    positions while a fifth watches. Compare-and-set must leave the maximum,
    the watcher must never see the position go down, and every save either
    lands, is a no-op, or is refused as behind: never a lost update."""
    writers = [store_factory(owner=f"w{i}") for i in range(4)]
    watcher = store_factory(owner="watcher")
    top = 400
    results: dict[int, list[tuple[int, int | None]]] = {i: [] for i in range(4)}
    observed: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(writers) + 1)
    done = threading.Event()

    def run(i: int, store: CheckpointStore) -> None:
        try:
            start.wait()
            for n in range(i, top, 4):  # w0: 1,5,9... w1: 2,6,10... interleaved
                try:
                    stored = store.save(cp(str(n + 1)))
                    key = stored.key
                    results[i].append((n + 1, key.sequence if key else None))
                except StaleCheckpointError:
                    results[i].append((n + 1, None))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    def watch() -> None:
        try:
            start.wait()
            while not done.is_set():
                got = watcher.load(STREAM).get("shardId-000000000000")
                if got is not None and got.key is not None:
                    observed.append(got.key.sequence)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(writers)]
    monitor = threading.Thread(target=watch)
    monitor.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    done.set()
    monitor.join(30)
    assert not errors, errors
    final = store_factory().load(STREAM)["shardId-000000000000"]
    assert final.sequence_number == str(top)
    assert observed == sorted(observed), "a reader saw the checkpoint move backwards"
    for i, outcomes in results.items():
        assert len(outcomes) == top // 4, i
        for wanted, stored in outcomes:
            # A save returns what is stored now: never less than what was asked.
            assert stored is None or stored >= wanted


def test_concurrent_writers_on_different_shards(store_factory: StoreFactory) -> None:
    writers = [store_factory(owner=f"w{i}") for i in range(3)]

    def run(i: int) -> None:
        for n in range(1, 21):
            writers[i].save(cp(str(n), shard=f"shardId-{i:012d}"))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    loaded = store_factory().load(STREAM)
    assert {c.sequence_number for c in loaded.values()} == {"20"}
    assert len(loaded) == 3


def test_a_pinned_start_round_trips_and_gives_way_to_real_progress(
    store_factory: StoreFactory,
) -> None:
    from datetime import UTC

    store = store_factory()
    when = datetime(2026, 11, 24, 1, 2, 3, tzinfo=UTC)
    pin = store.save(cp(None, start_at=when))
    assert pin.is_pin and pin.start_at == when
    got = store_factory().load(STREAM)["shardId-000000000000"]
    assert got.is_pin and got.start_at == when and got.key is None
    # A second pin (another worker, a later start) changes nothing: the first wins.
    later = datetime(2026, 11, 24, 2, 0, 0, tzinfo=UTC)
    assert store.save(cp(None, start_at=later)).start_at == when
    # Real progress replaces the pin; a pin never replaces real progress.
    store.save(cp("42"))
    with pytest.raises(StaleCheckpointError):
        store.save(cp(None, start_at=later))
    final = store_factory().load(STREAM)["shardId-000000000000"]
    assert final.sequence_number == "42" and not final.is_pin
    # A shard that ends before anything was read keeps no position.
    other = "shardId-000000000001"
    store.save(cp(None, shard=other, start_at=when))
    ended = store.mark_ended(STREAM, other, "w")
    assert ended.shard_end and ended.sequence_number is None


def test_a_stream_created_again_gets_fresh_checkpoints_and_the_old_ones_are_kept_aside(
    store_factory: StoreFactory,
) -> None:
    """Issue 24: a stream's identity is its creation time; the first claim keeps what a
    store written before identities holds, a claim of another identity moves it aside."""
    store = store_factory()
    store.save(cp("500"))
    assert store.claim_stream(STREAM, "2026-01-01T00:00:00+00:00") is None  # adopted
    assert store.claim_stream(STREAM, "2026-01-01T00:00:00+00:00") is None
    assert store_factory().load(STREAM)["shardId-000000000000"].sequence_number == "500"
    old = store_factory().claim_stream(STREAM, "2026-02-02T00:00:00+00:00")
    assert old == "2026-01-01T00:00:00+00:00"
    assert store_factory().load(STREAM) == {}  # the new stream starts fresh
    store.save(cp("7"))  # lower than the old stream's 500: not "backwards"
    assert store_factory().load(STREAM)["shardId-000000000000"].sequence_number == "7"
    assert store_factory().claim_stream(STREAM, "2026-02-02T00:00:00+00:00") is None
    assert store_factory().load("payments") == {}  # other streams untouched
