"""KinesisSpout logic against an in-memory fake client and a fake clock."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator
from kit import FakeClock, spout_config
from test_getter_fakes import FakeKinesis, client_error, unreachable

from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.config import InitialPosition
from kinesis_spout.deadletter import DeadLetter
from kinesis_spout.errors import (
    CredentialsError,
    EndpointUnreachableError,
    KinesisSpoutError,
    StreamNotFoundError,
)
from kinesis_spout.metrics import InMemoryMetrics
from kinesis_spout.records import Checkpoint, Record, ShardState
from kinesis_spout.spout import KinesisSpout
from tracker import SequenceKey

S = [f"shardId-{i:012d}" for i in range(8)]


class ListSink:
    """A dead-letter sink that keeps entries in a list (and can be made to fail)."""

    def __init__(self) -> None:
        self.entries: list[tuple[Record, str | None, int]] = []
        self.failing = False
        self.closed = False

    def write_many(self, letters: Sequence[DeadLetter]) -> None:
        if self.failing:
            raise OSError("disk full")
        self.entries.extend((d.record, d.error, d.attempts) for d in letters)

    def close(self) -> None:
        self.closed = True


class Rig:
    """A spout over a FakeKinesis with a fake clock, memory store and list sink."""

    def __init__(self, shards: int = 2, **cfg: Any) -> None:
        self.kinesis = FakeKinesis(shards=shards)
        self.clock = FakeClock()
        self.store = MemoryCheckpointStore("j")
        self.sink = ListSink()
        self.metrics = InMemoryMetrics()
        base: dict[str, Any] = {
            "job_name": "j",
            "worker_id": "w1",
            "throttle_backoff": 0.5,
            "message_timeout": 0.0,
        }
        self.config = spout_config(fast=False, **{**base, **cfg})
        self.spout = KinesisSpout(
            self.config,
            store=self.store,
            dead_letters=self.sink,
            metrics=self.metrics,
            clock=self.clock,
            client=self.kinesis,
            rng=random.Random(1),
        )

    def open(self) -> KinesisSpout:
        self.spout.open()
        return self.spout

    def drain(self, ack: bool = True, rounds: int = 200, step: float = 0.25) -> list[Record]:
        """Read until idle (acking everything if ``ack``), advancing the clock."""
        out: list[Record] = []
        for _ in range(rounds):
            batch = self.spout.next_batch(1000)
            out.extend(batch)
            if ack:
                self.spout.ack_many(batch)
            if not batch:
                if self.spout.is_idle:
                    return out
                self.clock.advance(max(step, self.spout.poll_delay()))
        return out

    def cp(self, shard: str) -> Checkpoint | None:
        return self.store.load("s").get(shard)


def data(records: list[Record]) -> list[bytes]:
    return [r.data for r in records]


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    yield r


# --- open and bad input ------------------------------------------------------


def test_use_before_open_is_an_error(rig: Rig) -> None:
    with pytest.raises(KinesisSpoutError, match="open"):
        rig.spout.next_batch(1)


def test_unknown_stream_names_stream_endpoint_and_region(rig: Rig) -> None:
    rig.kinesis.exists = False
    with pytest.raises(StreamNotFoundError, match=r"'s' not found at http://fake \(region us-e"):
        rig.open()


def test_unreachable_endpoint_is_a_clear_error(rig: Rig) -> None:
    rig.kinesis.fault("DescribeStreamSummary", unreachable())
    with pytest.raises(EndpointUnreachableError, match="cannot reach Kinesis at http://fake"):
        rig.open()


def test_rejected_credentials_are_a_clear_error(rig: Rig) -> None:
    rig.kinesis.fault(
        "DescribeStreamSummary",
        client_error("UnrecognizedClientException", op="DescribeStreamSummary"),
    )
    with pytest.raises(CredentialsError, match="credentials rejected"):
        rig.open()


def test_open_rides_out_throttling_and_dropped_calls() -> None:
    r = Rig()
    slept: list[float] = []
    r.spout = KinesisSpout(
        r.config,
        store=r.store,
        dead_letters=r.sink,
        clock=r.clock,
        client=r.kinesis,
        rng=random.Random(1),
        sleep=slept.append,
    )
    r.kinesis.fault(
        "DescribeStreamSummary",
        client_error("LimitExceededException", op="DescribeStreamSummary"),
        client_error("InternalFailure", status=500, op="DescribeStreamSummary"),
    )
    r.kinesis.fault("ListShards", client_error("LimitExceededException", op="ListShards"))
    r.kinesis.put_many(S[0], 3)
    r.open()
    assert len(slept) == 3 and all(d >= 0 for d in slept)
    assert len(r.drain()) == 3


def test_open_gives_up_on_endless_throttling_with_the_error() -> None:
    r = Rig()
    r.spout = KinesisSpout(
        r.config,
        store=r.store,
        dead_letters=r.sink,
        clock=r.clock,
        client=r.kinesis,
        sleep=lambda _: None,
    )
    r.kinesis.fault(
        "DescribeStreamSummary",
        *[client_error("LimitExceededException", op="DescribeStreamSummary")] * 10,
    )
    with pytest.raises(KinesisSpoutError, match="LimitExceededException"):
        r.open()
    assert r.kinesis.calls["DescribeStreamSummary"] == 6
    assert r.store.writes == 0


def test_list_shards_follows_pagination(rig: Rig) -> None:
    r = Rig(shards=5)
    r.kinesis.page_size = 2
    r.open()
    assert list(r.spout.shard_states()) == S[:5]
    assert r.kinesis.calls["ListShards"] == 3


# --- emitting ----------------------------------------------------------------


def test_next_tuple_is_round_robin_over_shards() -> None:
    r = Rig(shards=3)
    for i, s in enumerate(S[:3]):
        r.kinesis.put_many(s, 3, prefix=f"s{i}-")
    r.open()
    got = [r.spout.next_tuple() for _ in range(9)]
    assert [x.shard_id for x in got if x] == S[:3] * 3
    assert r.spout.next_tuple() is None


def test_next_batch_takes_a_fair_share_from_each_shard() -> None:
    r = Rig(shards=3)
    for s in S[:3]:
        r.kinesis.put_many(s, 10)
    r.open()
    batch = r.spout.next_batch(9)
    assert [x.shard_id for x in batch].count(S[0]) == 3
    assert [x.shard_id for x in batch].count(S[2]) == 3
    # One shard with data and two empty: the whole batch comes from it.
    r2 = Rig(shards=3)
    r2.kinesis.put_many(S[1], 10)
    r2.open()
    assert len(r2.spout.next_batch(8)) == 8


def test_message_ids_and_acks_by_id_or_record(rig: Rig) -> None:
    seqs = rig.kinesis.put_many(S[0], 2)
    rig.open()
    a, b = rig.spout.next_batch(10)
    assert a.message_id == f"{S[0]}:{seqs[0]}"
    rig.spout.ack(a.message_id)
    rig.spout.ack(b)
    assert rig.spout.in_flight == 0
    rig.spout.ack(a.message_id)
    rig.spout.ack("garbage")
    rig.spout.ack(f"{S[7]}:10")
    st = rig.spout.stats()
    assert (st.read, st.acked, st.ignored) == (2, 2, 3)


def test_failed_record_is_retried_before_new_records(rig: Rig) -> None:
    rig.kinesis.put_many(S[0], 3)
    rig.open()
    first = rig.spout.next_batch(1)[0]
    rig.spout.fail(first.message_id, "boom")
    nxt = rig.spout.next_batch(2)
    assert nxt[0].key == first.key and nxt[0].attempt == 2 and nxt[0].data == first.data
    assert nxt[1].attempt == 1
    assert rig.spout.stats().retried == 1
    assert rig.metrics.count("retries") == 1


def test_retry_backoff_delays_the_retry() -> None:
    r = Rig(retry_backoff=2.0, empty_shard_backoff=5.0)
    r.kinesis.put(S[0], b"x")
    r.open()
    rec = r.spout.next_batch(5)[0]
    r.clock.advance(0.3)
    assert r.spout.next_batch(5) == []  # both shards seen empty: next polls in 5 s
    r.spout.fail(rec)
    assert r.spout.next_batch(5) == []
    assert r.spout.poll_delay() == pytest.approx(2.0)
    r.clock.advance(2.0)
    assert [x.attempt for x in r.spout.next_batch(5)] == [2]


def test_out_of_retries_goes_to_dead_letters_once_and_the_shard_moves_on() -> None:
    r = Rig(retry_limit=2)
    r.kinesis.put_many(S[0], 3)
    r.open()
    poison = r.spout.next_batch(1)[0]
    attempts = [poison.attempt]
    r.spout.fail(poison, "bad payload")
    for _ in range(2):
        again = r.spout.next_batch(1)[0]
        assert again.key == poison.key
        attempts.append(again.attempt)
        r.spout.fail(again, "bad payload")
    assert attempts == [1, 2, 3]
    assert [(e[0].key, e[1], e[2]) for e in r.sink.entries] == [(poison.key, "bad payload", 3)]
    r.spout.fail(poison, "again")  # late fail of a given-up record: ignored
    assert len(r.sink.entries) == 1
    rest = r.drain()
    assert len(rest) == 2 and poison.key not in {x.key for x in rest}
    r.spout.checkpoint(force=True)
    cp = r.cp(S[0])
    assert cp is not None and cp.key == rest[-1].key
    st = r.spout.stats()
    assert (st.dead_lettered, st.failed) == (1, 3)


def test_retry_limit_zero_dead_letters_on_first_fail() -> None:
    r = Rig(retry_limit=0)
    r.kinesis.put(S[0], b"x")
    r.open()
    r.spout.fail(r.spout.next_batch(1)[0], "nope")
    assert len(r.sink.entries) == 1 and r.spout.in_flight == 0


def test_failing_dead_letter_sink_holds_the_checkpoint_and_stops_the_shard() -> None:
    r = Rig(retry_limit=0)
    r.kinesis.put_many(S[0], 4)
    r.open()
    a, b = r.spout.next_batch(2)
    r.sink.failing = True
    r.spout.fail(a, "bad")
    r.spout.ack(b)
    assert r.spout.next_batch(10) == []  # shard 0 stops while its dead letter is pending
    r.spout.checkpoint(force=True)
    assert r.cp(S[0]) is None
    assert not r.spout.is_idle
    r.sink.failing = False
    r.spout.checkpoint(force=True)
    assert [e[0].key for e in r.sink.entries] == [a.key]
    cp = r.cp(S[0])
    assert cp is not None and cp.key == b.key
    assert len(r.spout.next_batch(10)) == 2


def test_a_shard_at_its_in_flight_bound_is_not_fetched() -> None:
    r = Rig(shards=1, max_in_flight=3, records_per_call=5)
    r.kinesis.put_many(S[0], 10)
    r.open()
    first = r.spout.next_batch(10)
    assert len(first) == 3
    calls = r.kinesis.calls["GetRecords"]
    r.clock.advance(5)
    assert r.spout.next_batch(10) == []
    assert r.kinesis.calls["GetRecords"] == calls
    assert r.spout.poll_delay() > 0
    r.spout.ack_many(first)
    assert len(r.drain()) == 7


def test_acked_but_unsaved_records_count_against_the_bound() -> None:
    # The bound is on what a crash would replay: records handed out after the
    # saved checkpoint, done or not. The head record still pending holds it.
    r = Rig(shards=1, max_in_flight=4, records_per_call=10, checkpoint_interval=1000.0)
    r.kinesis.put_many(S[0], 20)
    r.open()
    first = r.spout.next_batch(10)
    assert len(first) == 4
    r.spout.ack_many(first[1:])  # the first one is still pending
    assert r.spout.next_batch(10) == []
    assert r.store.writes == 0
    r.spout.ack(first[0])
    # Half the window or more is now covered: saved early (not at the interval).
    nxt = r.spout.next_batch(10)
    assert len(nxt) == 4
    assert r.store.writes == 1
    assert r.cp(S[0]) is not None and r.cp(S[0]).sequence_number == first[-1].sequence_number


def test_early_saves_are_per_half_window_never_per_record() -> None:
    r = Rig(shards=1, max_in_flight=10, records_per_call=10, checkpoint_interval=1000.0)
    r.kinesis.put_many(S[0], 200)
    r.open()
    got = 0
    for _ in range(400):
        batch = r.spout.next_batch(1)  # one record at a time, acked at once
        r.spout.ack_many(batch)
        got += len(batch)
        if not batch:
            r.clock.advance(0.25)
        if got == 200:
            break
    assert got == 200
    # A write per 5 records at most (half of max_in_flight), never one per record.
    assert 0 < r.store.writes <= 200 // 5


def test_crash_replays_at_most_max_in_flight_per_shard() -> None:
    r = Rig(shards=2, max_in_flight=7, records_per_call=10, checkpoint_interval=1000.0)
    for s in S[:2]:
        r.kinesis.put_many(s, 100)
    r.open()
    processed: list[Record] = []
    for _ in range(23):  # process a while, acking everything, then "crash" (no close)
        batch = r.spout.next_batch(3)
        processed.extend(batch)
        r.spout.ack_many(batch)
    again = KinesisSpout(
        r.config, store=r.store, dead_letters=r.sink, clock=r.clock, client=r.kinesis
    )
    again.open()
    replayed: list[Record] = []
    for _ in range(200):
        batch = again.next_batch(50)
        again.ack_many(batch)
        replayed.extend(batch)
        if not batch:
            if again.is_idle:
                break
            r.clock.advance(max(0.25, again.poll_delay()))
    seen = {(x.shard_id, x.sequence_number) for x in processed}
    for s in S[:2]:
        dups = [x for x in replayed if x.shard_id == s and (s, x.sequence_number) in seen]
        assert len(dups) <= 7
    everything = seen | {(x.shard_id, x.sequence_number) for x in replayed}
    assert len(everything) == 200


def test_message_timeout_fails_and_redelivers() -> None:
    r = Rig(message_timeout=10.0, retry_limit=1)
    r.kinesis.put(S[0], b"x")
    r.open()
    first = r.spout.next_batch(5)
    assert r.spout.poll_delay() <= 1.0
    r.clock.advance(10.5)
    again = r.spout.next_batch(5)
    assert [x.attempt for x in again] == [2] and again[0].key == first[0].key
    r.clock.advance(10.5)
    assert r.spout.next_batch(5) == []
    assert r.sink.entries[0][1] is not None and "timeout" in r.sink.entries[0][1]


def test_throttling_is_counted_and_loses_nothing(rig: Rig) -> None:
    rig.kinesis.put_many(S[0], 5)
    rig.kinesis.fault(
        "GetRecords",
        client_error("ProvisionedThroughputExceededException"),
        client_error("InternalFailure", 500),
    )
    rig.open()
    got = rig.drain()
    assert data(got) == [f"r{i}".encode() for i in range(5)]
    assert rig.metrics.count("kinesis_throttled") == 1
    assert rig.metrics.count("kinesis_errors") == 1


def test_a_fatal_error_mid_batch_hands_out_what_was_taken_first() -> None:
    r = Rig(shards=2)
    r.kinesis.put_many(S[0], 2)
    r.kinesis.put_many(S[1], 2)
    r.open()
    r.kinesis.fault("GetShardIterator", None, client_error("ResourceNotFoundException"))
    batch = r.spout.next_batch(10)
    assert len(batch) == 2 and r.spout.poll_delay() == 0
    with pytest.raises(StreamNotFoundError):
        r.spout.next_batch(10)


# --- checkpoints --------------------------------------------------------------


def test_checkpoints_are_written_per_interval_never_per_record() -> None:
    r = Rig(checkpoint_interval=5.0)
    r.kinesis.put_many(S[0], 50)
    r.kinesis.put_many(S[1], 50)
    r.open()
    for rec in r.spout.next_batch(100):
        r.spout.ack(rec)
    assert r.store.writes == 0
    r.clock.advance(5.0)
    r.spout.next_batch(1)
    assert r.store.writes == 2
    r.spout.checkpoint()
    assert r.store.writes == 2
    r.spout.close()
    assert r.store.writes == 2  # nothing moved since
    cps = r.store.load("s")
    assert {s: c.sequence_number for s, c in cps.items()} == {
        S[0]: r.kinesis.shards[S[0]].records[-1]["SequenceNumber"],
        S[1]: r.kinesis.shards[S[1]].records[-1]["SequenceNumber"],
    }
    assert all(c.owner == "w1" and not c.shard_end for c in cps.values())


def test_checkpoint_covers_only_the_contiguous_done_prefix(rig: Rig) -> None:
    seqs = rig.kinesis.put_many(S[0], 4)
    rig.open()
    recs = rig.spout.next_batch(4)
    rig.spout.ack_many([recs[0], recs[2].message_id, recs[3]])
    rig.spout.checkpoint(force=True)
    cp = rig.cp(S[0])
    assert cp is not None and cp.sequence_number == seqs[0]
    rig.spout.ack(recs[1])
    rig.spout.checkpoint(force=True)
    cp = rig.cp(S[0])
    assert cp is not None and cp.sequence_number == seqs[3]


def test_resume_starts_after_the_stored_checkpoint() -> None:
    r = Rig(shards=1)
    seqs = r.kinesis.put_many(S[0], 5)
    r.store.save(Checkpoint("s", S[0], seqs[2], 0))
    r.open()
    assert data(r.drain()) == [b"r3", b"r4"]


def test_close_writes_the_final_checkpoint_and_reopen_loses_nothing() -> None:
    r = Rig(shards=2)
    r.kinesis.put_many(S[0], 6)
    r.kinesis.put_many(S[1], 6)
    r.open()
    first = r.spout.next_batch(6)
    r.spout.ack_many(first[:4])  # two left unacked: they must come back
    r.spout.close()
    assert r.sink.closed is False and r.store.closed is False  # not ours to close
    r2 = Rig(shards=2)
    r2.kinesis, r2.store = r.kinesis, r.store
    r2.spout = KinesisSpout(r2.config, store=r.store, client=r.kinesis, clock=r2.clock)
    r2.open()
    second = r2.drain()
    done = {x.message_id for x in first[:4]}
    again = {x.message_id for x in second}
    assert not done & again  # acked before close: not replayed
    assert {x.message_id for x in first[4:]} <= again  # unacked: replayed
    assert done | again == {
        f"{s}:{rec['SequenceNumber']}" for s in S[:2] for rec in r.kinesis.shards[s].records
    }
    assert len(second) == 8


def test_stale_checkpoint_fences_the_shard_without_crashing() -> None:
    r = Rig(shards=2)
    seqs0 = r.kinesis.put_many(S[0], 5)
    r.kinesis.put_many(S[1], 5)
    r.open()
    batch = r.spout.next_batch(4)
    r.spout.ack_many(batch)
    # Another owner has moved shard 0 far ahead.
    r.store.save(Checkpoint("s", S[0], seqs0[4], 0, owner="w2"))
    r.spout.checkpoint(force=True)
    rest = r.drain()
    assert {x.shard_id for x in rest} == {S[1]}
    cp = r.cp(S[0])
    assert cp is not None and cp.owner == "w2"


# --- shard lifecycle -----------------------------------------------------------


def test_split_parent_is_drained_and_ended_before_children_start() -> None:
    r = Rig(shards=1)
    r.kinesis.put_many(S[0], 3, prefix="p")
    r.kinesis.split(S[0], (S[1], S[2]))
    r.kinesis.put_many(S[1], 2, prefix="a")
    r.kinesis.put_many(S[2], 2, prefix="b")
    r.open()
    assert r.spout.shard_states() == {
        S[0]: ShardState.OPEN,
        S[1]: ShardState.WAITING,
        S[2]: ShardState.WAITING,
    }
    parent = r.spout.next_batch(10)
    assert data(parent) == [b"p0", b"p1", b"p2"]
    assert r.spout.shard_states()[S[0]] is ShardState.DRAINING
    r.clock.advance(1)
    assert r.spout.next_batch(10) == []  # parent records still in flight: children wait
    assert r.spout.shard_states()[S[1]] is ShardState.WAITING
    r.spout.ack_many(parent)
    children = r.drain()
    assert sorted(data(children)) == [b"a0", b"a1", b"b0", b"b1"]
    assert r.spout.shard_states()[S[0]] is ShardState.ENDED
    cp = r.cp(S[0])
    assert cp is not None and cp.shard_end and cp.sequence_number is not None


def test_merge_child_waits_for_both_parents() -> None:
    r = Rig(shards=2)
    r.kinesis.put_many(S[0], 1, prefix="x")
    r.kinesis.put_many(S[1], 1, prefix="y")
    for p in S[:2]:
        r.kinesis.shards[p].closed = True
        r.kinesis.shards[p].children = (S[2],)
    r.kinesis.add_shard(S[2], (S[0], S[1]))
    r.kinesis.put_many(S[2], 1, prefix="z")
    r.open()
    xs = r.spout.next_batch(10)
    x = next(rec for rec in xs if rec.shard_id == S[0])
    r.spout.ack(x)
    r.clock.advance(1)
    assert r.spout.next_batch(10) == []
    assert r.spout.shard_states()[S[2]] is ShardState.WAITING
    r.spout.ack_many(rec for rec in xs if rec.shard_id == S[1])
    assert data(r.drain()) == [b"z0"]


def test_child_of_a_foreign_parent_waits_for_shard_end_in_the_store() -> None:
    r = Rig(shards=1, checkpoint_interval=2.0)
    r.kinesis.put(S[0], b"parent")
    r.kinesis.split(S[0], (S[1],))
    r.kinesis.put(S[1], b"child")
    r.open()
    r.spout.set_owned_shards([S[1]])
    assert r.spout.shard_states() == {S[1]: ShardState.WAITING}
    r.clock.advance(3)
    assert r.spout.next_batch(10) == []
    r.store.mark_ended("s", S[0], "w2")
    r.clock.advance(3)
    assert data(r.drain()) == [b"child"]


def test_ended_shards_in_the_store_are_not_read_again() -> None:
    r = Rig(shards=1)
    r.kinesis.put(S[0], b"old")
    r.kinesis.split(S[0], (S[1],))
    r.kinesis.put(S[1], b"new")
    r.store.mark_ended("s", S[0], "w0")
    r.open()
    assert data(r.drain()) == [b"new"]


def test_latest_children_of_a_resharded_stream_start_at_the_pinned_start() -> None:
    # Hole 6: at a first open with LATEST, the open children of a closed parent start
    # where LATEST was pinned, not at their TRIM_HORIZON (what was written before the
    # job started is not read).
    r = Rig(shards=1, initial_position=InitialPosition.LATEST)
    r.kinesis.split(S[0], (S[1],))
    r.kinesis.put(S[1], b"before the job started")
    r.open()
    assert {s: cp.is_pin for s, cp in r.store.load("s").items()} == {S[0]: True, S[1]: True}
    assert r.drain() == []
    r.kinesis.arrival = datetime.now(UTC)
    r.kinesis.put(S[1], b"after the start")
    r.clock.advance(5)  # past the empty-shard backoff of the caught-up child
    assert data(r.drain()) == [b"after the start"]
    types = {q["ShardId"]: q["ShardIteratorType"] for q in r.kinesis.iterator_requests}
    assert types == {S[0]: "LATEST", S[1]: "AT_TIMESTAMP"}  # the open parent: exactly LATEST


def test_children_born_after_the_start_continue_their_parent_from_trim_horizon() -> None:
    r = Rig(shards=1, initial_position=InitialPosition.LATEST)
    r.open()
    r.kinesis.arrival = datetime.now(UTC)
    r.kinesis.put(S[0], b"parent")
    r.kinesis.split(S[0], (S[1],))
    r.kinesis.put(S[1], b"child")
    assert data(r.drain()) == [b"parent", b"child"]
    types = [q["ShardIteratorType"] for q in r.kinesis.iterator_requests]
    assert types == ["LATEST", "TRIM_HORIZON"]


def test_refresh_adopts_new_shards() -> None:
    r = Rig(shards=1, shard_refresh_interval=10.0)
    r.open()
    r.kinesis.add_shard(S[1])
    r.kinesis.put(S[1], b"late")
    r.clock.advance(11)
    assert data(r.drain()) == [b"late"]


# --- ownership, activation, idleness -----------------------------------------------


def test_set_owned_shards_releases_with_a_flush_and_adopts_from_the_store() -> None:
    r = Rig(shards=2)
    r.kinesis.put_many(S[0], 4)
    r.kinesis.put_many(S[1], 4)
    r.open()
    batch = r.spout.next_batch(8)
    s0 = [x for x in batch if x.shard_id == S[0]]
    r.spout.ack_many(s0[:2])
    r.spout.set_owned_shards([S[1]])
    cp = r.cp(S[0])
    assert cp is not None and cp.key == s0[1].key  # flushed on release
    assert list(r.spout.shard_states()) == [S[1]]
    r.spout.ack(s0[2])  # a late ack for a released shard is harmless
    r.spout.set_owned_shards(None)
    again = [x for x in r.drain() if x.shard_id == S[0]]
    assert [x.key for x in again] == [x.key for x in s0[2:]]


def test_deactivate_stops_emitting_but_takes_acks(rig: Rig) -> None:
    rig.kinesis.put_many(S[0], 4)
    rig.open()
    got = rig.spout.next_batch(2)
    rig.spout.deactivate()
    assert rig.spout.next_batch(10) == [] and rig.spout.next_tuple() is None
    rig.spout.ack_many(got)
    assert rig.spout.in_flight == 0
    rig.spout.activate()
    assert len(rig.spout.next_batch(10)) == 2


def test_is_idle_needs_everything_done_and_every_shard_caught_up(rig: Rig) -> None:
    rig.kinesis.put_many(S[0], 2)
    rig.open()
    assert not rig.spout.is_idle
    got = rig.spout.next_batch(10)
    assert not rig.spout.is_idle
    rig.spout.ack_many(got)
    assert not rig.spout.is_idle  # shard 0 not yet seen empty
    rig.clock.advance(1)
    rig.spout.next_batch(10)
    assert rig.spout.is_idle


def test_poll_delay_says_when_to_come_back() -> None:
    rig = Rig(shards=1)
    rig.kinesis.put_many(S[0], 3)
    rig.open()
    assert rig.spout.poll_delay() == 0.0
    rig.spout.ack_many(rig.spout.next_batch(2))
    assert rig.spout.poll_delay() == 0.0  # one still buffered
    rig.spout.ack_many(rig.spout.next_batch(2))
    rig.clock.advance(0.3)
    rig.spout.next_batch(2)  # the shard is caught up now
    assert rig.spout.poll_delay() == pytest.approx(rig.config.empty_shard_backoff)


def test_stats_and_metrics(rig: Rig) -> None:
    rig.kinesis.put_many(S[0], 3)
    rig.open()
    got = rig.spout.next_batch(3)
    rig.spout.ack_many(got[:2])
    rig.clock.advance(6)
    rig.spout.checkpoint()
    st = rig.spout.stats()
    assert (st.read, st.acked, st.in_flight) == (3, 2, 1)
    assert st.millis_behind_latest[S[0]] == 0 and st.checkpoint_age == 0.0
    assert rig.metrics.count("records_read") == 3
    assert rig.metrics.gauge_value("in_flight", S[0]) == 1
    assert rig.metrics.gauge_value("millis_behind_latest", S[0]) == 0
    assert rig.metrics.count("checkpoint_writes") == 1


# --- KPL aggregates and checkpoints -------------------------------------------------


def put_aggregate(fk: FakeKinesis, n: int) -> str:
    agg = RecordAggregator()
    for i in range(n):
        agg.add_user_record(f"k{i}", f"u{i}".encode())
    pk, _ehk, payload = agg.clear_and_get().get_contents()
    return fk.put(S[0], payload, pk)


def test_checkpoint_inside_an_aggregate_and_mid_aggregate_resume() -> None:
    r = Rig(shards=1)
    seq = put_aggregate(r.kinesis, 4)
    r.open()
    subs = r.spout.next_batch(10)
    assert [x.message_id for x in subs] == [f"{S[0]}:{seq}"] + [
        f"{S[0]}:{seq}:{i}" for i in (1, 2, 3)
    ]
    r.spout.ack(subs[0])
    r.spout.checkpoint(force=True)
    assert r.cp(S[0]) is None  # (seq, 0) would resume after the whole aggregate: held back
    r.spout.ack(subs[1])
    r.spout.close()
    cp = r.cp(S[0])
    assert cp is not None and cp.key == SequenceKey(int(seq), 1)
    r2 = Rig(shards=1)
    r2.spout = KinesisSpout(r2.config, store=r.store, client=r.kinesis, clock=r2.clock)
    r2.open()
    assert data(r2.drain()) == [b"u2", b"u3"]


def test_an_idle_stream_s_checkpoints_do_not_age_and_in_flight_is_known_from_the_open(
    rig: Rig,
) -> None:
    """``checkpoint_age_seconds`` never appeared for an idle stream (nothing to write, so
    no write), and ``in_flight_records`` was missing until the first checkpoint round."""
    rig.open()
    assert rig.metrics.gauge_value("in_flight", S[0]) == 0
    assert rig.metrics.gauge_value("checkpoint_age_seconds") == 0.0
    assert rig.spout.stats().checkpoint_age == 0.0
    for _ in range(3):  # idle rounds: nothing to write, the stored checkpoints current
        rig.clock.advance(6)
        assert rig.spout.next_batch(10) == []
        rig.spout.checkpoint()
        assert rig.spout.stats().checkpoint_age == 0.0
    rig.kinesis.put_many(S[0], 2)
    rig.clock.advance(2)
    rig.spout.next_batch(10)  # read, not acked: the next round has nothing it may write
    rig.clock.advance(6)
    rig.spout.checkpoint(force=True)
    assert rig.spout.stats().checkpoint_age == 0.0  # nothing done yet: nothing held back


def test_the_close_line_says_records_not_the_deliveries_a_job_counts_itself() -> None:
    """The Spark job retries inside its micro-batches, which the reader does not see: its
    close line said ``retried=0`` beside a summary of ``retried 4``."""
    from kinesis_spout.core.stats import SpoutStats

    line = str(
        SpoutStats(
            read=10, acked=8, failed=5, retried=0, dead_lettered=2, in_flight=0, checkpoint_writes=3
        )
    )
    assert line == "10 read, 8 acked, 2 dead-lettered, 0 in flight; 3 checkpoint writes"
