"""KinesisShardGetter and BufferedShardGetter against an in-memory fake client."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator
from botocore.exceptions import ClientError, ConnectionClosedError
from test_getter_fakes import FakeKinesis, client_error, unreachable

from kinesis_spout.config import InitialPosition
from kinesis_spout.errors import (
    CredentialsError,
    EndpointUnreachableError,
    ExpiredIteratorError,
    KinesisError,
    StreamNotFoundError,
    ThrottledError,
    TransientKinesisError,
)
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.buffered import BufferedShardGetter
from kinesis_spout.kinesis.getter import NEVER, InvalidPositionError, KinesisShardGetter
from kinesis_spout.records import ShardBatch
from tracker import ExponentialBackoff, JitteredBackoff, NoBackoff, SequenceKey

S0 = "shardId-000000000000"


def make_getter(fk: FakeKinesis, **kw: object) -> KinesisShardGetter:
    kw.setdefault("backoff", NoBackoff())
    return KinesisShardGetter(KinesisApi(fk, fk.stream), S0, **kw)  # type: ignore[arg-type]


def seqs(batch: ShardBatch) -> list[str]:
    return [r.sequence_number for r in batch.records]


def aggregate(pairs: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    agg = RecordAggregator()
    for pk, data in pairs:
        assert agg.add_user_record(pk, data) is None
    rec = agg.clear_and_get()
    pk, _ehk, data = rec.get_contents()
    return pk, data


def test_first_poll_opens_trim_horizon_and_returns_records() -> None:
    fk = FakeKinesis(shards=1)
    fk.put_many(S0, 3)
    g = make_getter(fk, limit=500)
    b = g.poll(0.0)
    assert seqs(b) == ["10", "20", "30"]
    assert fk.iterator_requests[0]["ShardIteratorType"] == "TRIM_HORIZON"
    assert fk.limits == [500]
    r = b.records[0]
    assert (r.stream_name, r.shard_id, r.partition_key, r.data) == ("s", S0, "pk", b"r0")
    assert r.key == SequenceKey(10, 0) and r.attempt == 1 and r.message_id == f"{S0}:10"
    assert r.approximate_arrival == datetime(2026, 1, 1, tzinfo=UTC)
    assert b.called and not b.ended and b.millis_behind_latest == 0
    assert g.after == SequenceKey(30, 0)


def test_rate_limit_spaces_calls_per_shard() -> None:
    fk = FakeKinesis(shards=1)
    fk.put_many(S0, 10)
    g = make_getter(fk, limit=2, max_calls_per_second=5.0)
    assert len(g.poll(0.0).records) == 2
    early = g.poll(0.1)
    assert early.records == [] and not early.called and early.next_poll_at == pytest.approx(0.2)
    assert fk.calls["GetRecords"] == 1
    assert len(g.poll(0.2).records) == 2
    assert fk.calls["GetRecords"] == 2


def test_empty_answer_backs_off_and_marks_caught_up() -> None:
    fk = FakeKinesis(shards=1)
    g = make_getter(fk, empty_shard_backoff=1.5)
    b = g.poll(10.0)
    assert b.called and b.records == [] and b.next_poll_at == pytest.approx(11.5)
    assert g.caught_up
    fk.put(S0, b"new")
    assert g.poll(11.0).called is False
    b = g.poll(11.5)
    assert seqs(b) == ["10"] and not g.caught_up


def test_a_shard_that_stays_empty_is_polled_less_and_less_often() -> None:
    fk = FakeKinesis(shards=1)
    g = make_getter(fk, empty_shard_backoff=1.5, empty_shard_backoff_max=5.0)
    now, waits = 0.0, []
    for _ in range(5):
        b = g.poll(now)
        assert b.called and b.records == []
        waits.append(b.next_poll_at - now)
        now = b.next_poll_at
    assert waits == pytest.approx([1.5, 3.0, 5.0, 5.0, 5.0])  # doubled, up to the max
    fk.put(S0, b"new")
    assert seqs(g.poll(now)) == ["10"]
    b = g.poll(now + 0.2)  # empty again after a record: the shortest wait again
    assert b.records == [] and b.next_poll_at - (now + 0.2) == pytest.approx(1.5)


def test_without_a_max_the_empty_wait_stays_fixed() -> None:
    fk = FakeKinesis(shards=1)
    g = make_getter(fk, empty_shard_backoff=1.5)
    assert [g.idle_wait(0) for _ in range(4)] == [1.5] * 4


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (client_error("ProvisionedThroughputExceededException"), ThrottledError),
        (client_error("LimitExceededException"), ThrottledError),
        (client_error("InternalFailure", 500), TransientKinesisError),
        (client_error("ServiceUnavailable", 503), TransientKinesisError),
        (client_error("SomethingOdd", 502), TransientKinesisError),
        (ConnectionClosedError(endpoint_url="http://fake"), TransientKinesisError),
        (unreachable(), EndpointUnreachableError),
    ],
)
def test_retriable_errors_back_off_with_jitter_and_keep_the_iterator(
    exc: Exception, kind: type[Exception]
) -> None:
    fk = FakeKinesis(shards=1)
    fk.put_many(S0, 4)
    backoff = JitteredBackoff(ExponentialBackoff(0.5, cap=10.0), random.Random(7))
    expected = JitteredBackoff(ExponentialBackoff(0.5, cap=10.0), random.Random(7))
    g = make_getter(fk, backoff=backoff, limit=2)
    assert seqs(g.poll(0.0)) == ["10", "20"]
    fk.fault("GetRecords", exc, exc)
    b = g.poll(1.0)
    assert isinstance(b.error, kind) and b.records == []
    d1 = max(0.2, expected.delay(1))
    assert b.next_poll_at == pytest.approx(1.0 + d1)
    b = g.poll(1.0 + d1)
    assert isinstance(b.error, kind)
    d2 = max(0.2, expected.delay(2))
    assert b.next_poll_at == pytest.approx(1.0 + d1 + d2)
    # The same iterator continues: no new GetShardIterator, nothing lost or repeated.
    b = g.poll(100.0)
    assert seqs(b) == ["30", "40"]
    assert len(fk.iterator_requests) == 1
    assert g.errors == 2
    # A success resets the attempt count.
    fk.fault("GetRecords", exc)
    b = g.poll(200.0)
    assert b.next_poll_at == pytest.approx(200.0 + max(0.2, expected.delay(1)))


def test_throttled_get_shard_iterator_backs_off_too() -> None:
    fk = FakeKinesis(shards=1)
    fk.put_many(S0, 2)
    fk.fault("GetShardIterator", client_error("LimitExceededException", op="GetShardIterator"))
    g = make_getter(fk, backoff=ExponentialBackoff(2.0))
    b = g.poll(0.0)
    assert isinstance(b.error, ThrottledError) and b.next_poll_at == pytest.approx(2.0)
    assert seqs(g.poll(2.0)) == ["10", "20"]


def test_expired_iterator_reopens_after_the_last_record_returned() -> None:
    fk = FakeKinesis(shards=1)
    fk.put_many(S0, 5)
    g = make_getter(fk, limit=2)
    assert seqs(g.poll(0.0)) == ["10", "20"]
    fk.fault("GetRecords", client_error("ExpiredIteratorException"))
    b = g.poll(1.0)
    assert isinstance(b.error, ExpiredIteratorError) and b.next_poll_at == pytest.approx(1.2)
    assert seqs(g.poll(1.2)) == ["30", "40"]
    req = fk.iterator_requests[-1]
    assert req["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER"
    assert req["StartingSequenceNumber"] == "20"
    assert g.expired_iterators == 1


def test_expiry_before_any_record_reopens_at_the_initial_position() -> None:
    fk = FakeKinesis(shards=1)
    g = make_getter(fk)
    fk.fault("GetRecords", client_error("ExpiredIteratorException"))
    g.poll(0.0)
    fk.put_many(S0, 2)
    assert seqs(g.poll(1.0)) == ["10", "20"]
    assert [r["ShardIteratorType"] for r in fk.iterator_requests] == ["TRIM_HORIZON"] * 2


def test_latest_expiry_reopens_at_the_time_first_opened() -> None:
    fk = FakeKinesis(shards=1)
    opened = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    g = make_getter(fk, position=InitialPosition.LATEST, wall_clock=lambda: opened)
    fk.fault("GetRecords", client_error("ExpiredIteratorException"))
    g.poll(0.0)
    g.poll(1.0)
    first, second = fk.iterator_requests
    assert first["ShardIteratorType"] == "LATEST"
    assert second["ShardIteratorType"] == "AT_TIMESTAMP"
    assert second["Timestamp"] == opened - timedelta(seconds=1)


def test_latest_pins_the_servers_clock_when_it_sends_one() -> None:
    fk = FakeKinesis(shards=1)
    real = fk.get_shard_iterator

    def with_date(**kw: object) -> dict[str, object]:
        resp = real(**kw)
        resp["ResponseMetadata"] = {"HTTPHeaders": {"date": "Sun, 01 Mar 2026 12:05:00 GMT"}}
        return resp

    fk.get_shard_iterator = with_date  # type: ignore[assignment,method-assign]
    g = make_getter(fk, position=InitialPosition.LATEST, wall_clock=lambda: datetime(1999, 1, 1))
    fk.fault("GetRecords", client_error("ExpiredIteratorException"))
    g.poll(0.0)
    g.poll(1.0)
    assert fk.iterator_requests[1]["Timestamp"] == datetime(2026, 3, 1, 12, 4, 59, tzinfo=UTC)


def test_at_timestamp_passes_the_timestamp() -> None:
    fk = FakeKinesis(shards=1)
    ts = datetime(2026, 2, 1, tzinfo=UTC)
    g = make_getter(fk, position=InitialPosition.AT_TIMESTAMP, timestamp=ts)
    g.poll(0.0)
    assert fk.iterator_requests[0]["Timestamp"] == ts
    with pytest.raises(ValueError, match="timestamp"):
        make_getter(fk, position=InitialPosition.AT_TIMESTAMP)


def test_resume_from_whole_record_checkpoint_uses_after_sequence() -> None:
    fk = FakeKinesis(shards=1)
    fk.put_many(S0, 4)
    g = make_getter(fk, start=SequenceKey(20, 0))
    assert seqs(g.poll(0.0)) == ["30", "40"]
    req = fk.iterator_requests[0]
    assert req["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER"
    assert req["StartingSequenceNumber"] == "20"


def test_resume_mid_aggregate_rereads_at_sequence_and_skips_done_sub_records() -> None:
    fk = FakeKinesis(shards=1)
    fk.put(S0, b"before")
    pk, data = aggregate([(f"k{i}", f"u{i}".encode()) for i in range(5)])
    agg_seq = fk.put(S0, data, pk)
    fk.put(S0, b"after")
    g = make_getter(fk, start=SequenceKey(int(agg_seq), 2))
    b = g.poll(0.0)
    req = fk.iterator_requests[0]
    assert req["ShardIteratorType"] == "AT_SEQUENCE_NUMBER"
    assert req["StartingSequenceNumber"] == agg_seq
    assert [(r.sub_sequence_number, r.data) for r in b.records] == [
        (3, b"u3"),
        (4, b"u4"),
        (0, b"after"),
    ]
    assert [r.partition_key for r in b.records[:2]] == ["k3", "k4"]
    # Sub-record 1 was skipped, so this answer names no aggregate head to hold back.
    assert b.aggregates == ()
    # A later re-open goes AFTER the last whole record returned.
    fk.fault("GetRecords", client_error("ExpiredIteratorException"))
    g.poll(1.0)
    g.poll(2.0)
    assert fk.iterator_requests[-1]["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER"


def test_aggregates_are_deaggregated_and_reported() -> None:
    fk = FakeKinesis(shards=1)
    pk, data = aggregate([("a", b"1"), ("b", b"2"), ("c", b"3")])
    agg_seq = fk.put(S0, data, pk)
    one_pk, one = aggregate([("solo", b"x")])
    fk.put(S0, one, one_pk)
    b = make_getter(fk).poll(0.0)
    assert [(r.key.sub_sequence, r.partition_key, r.data) for r in b.records] == [
        (0, "a", b"1"),
        (1, "b", b"2"),
        (2, "c", b"3"),
        (0, "solo", b"x"),
    ]
    assert b.aggregates == (int(agg_seq),)
    assert b.records[1].message_id == f"{S0}:{agg_seq}:1"


def test_rereads_are_never_duplicated() -> None:
    """Even if the server answers from too early a position, keys <= after are dropped."""
    fk = FakeKinesis(shards=1)
    fk.put_many(S0, 4)
    g = make_getter(fk, limit=2)
    assert seqs(g.poll(0.0)) == ["10", "20"]
    # A sloppy server: the re-opened iterator starts at the beginning again.
    fk.fault("GetRecords", client_error("ExpiredIteratorException"))
    g.poll(1.0)
    real = fk.get_shard_iterator
    fk.get_shard_iterator = lambda **kw: {"ShardIterator": f"{S0}|0"}  # type: ignore[method-assign]
    b = g.poll(2.0)
    fk.get_shard_iterator = real  # type: ignore[method-assign]
    assert seqs(b) == []
    assert seqs(g.poll(3.0)) == ["30", "40"]


def test_closed_shard_returns_its_last_records_with_ended_and_children() -> None:
    fk = FakeKinesis(shards=1)
    fk.put_many(S0, 3)
    fk.split(S0, ("shardId-000000000001", "shardId-000000000002"))
    g = make_getter(fk, limit=2)
    assert not g.poll(0.0).ended
    b = g.poll(1.0)
    assert b.ended and seqs(b) == ["30"] and b.next_poll_at == NEVER
    assert [c.shard_id for c in b.child_shards] == ["shardId-000000000001", "shardId-000000000002"]
    assert all(c.parent_shard_id == S0 for c in b.child_shards)
    assert g.ended and not g.due(1e9)
    calls = fk.calls["GetRecords"]
    again = g.poll(5.0)
    assert again.ended and again.records == [] and fk.calls["GetRecords"] == calls


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("ResourceNotFoundException", StreamNotFoundError),
        ("AccessDeniedException", CredentialsError),
        ("InvalidArgumentException", KinesisError),
    ],
)
def test_non_retriable_errors_are_raised(code: str, kind: type[Exception]) -> None:
    fk = FakeKinesis(shards=1)
    fk.fault("GetShardIterator", client_error(code, op="GetShardIterator"))
    g = make_getter(fk)
    with pytest.raises(kind, match=code):
        g.poll(0.0)


# --- buffered getter -------------------------------------------------------------


def test_buffered_getter_hands_out_slices_and_fetches_only_when_empty() -> None:
    fk = FakeKinesis(shards=1)
    fk.put_many(S0, 5)
    seen: list[ShardBatch] = []
    bg = BufferedShardGetter(make_getter(fk, limit=4))
    assert [r.sequence_number for r in bg.take(3, 0.0)] == ["10", "20", "30"]
    seen += bg.polled()
    assert bg.buffered == 1 and len(seen) == 1 and bg.polled() == []
    assert bg.ready_at() == -NEVER
    assert [r.sequence_number for r in bg.take(3, 0.05)] == ["40"]
    assert fk.calls["GetRecords"] == 1
    # Empty buffer, rate limit not passed: nothing, no call.
    assert bg.take(3, 0.1) == [] and fk.calls["GetRecords"] == 1
    assert bg.ready_at() == pytest.approx(0.2)
    assert [r.sequence_number for r in bg.take(3, 0.2)] == ["50"]
    seen += bg.polled()
    assert len(seen) == 2


def test_buffered_getter_take_zero_never_fetches() -> None:
    fk = FakeKinesis(shards=1)
    fk.put_many(S0, 2)
    bg = BufferedShardGetter(make_getter(fk))
    assert bg.take(0, 0.0) == [] and fk.calls["GetRecords"] == 0


def test_buffered_getter_ends_only_after_its_buffer_is_drained() -> None:
    fk = FakeKinesis(shards=1)
    fk.put_many(S0, 2)
    fk.split(S0, ("shardId-000000000001",))
    bg = BufferedShardGetter(make_getter(fk))
    assert len(bg.take(1, 0.0)) == 1
    assert bg.getter.ended and not bg.ended
    assert len(bg.take(1, 0.0)) == 1
    assert bg.ended


@pytest.mark.parametrize(
    "exc",
    [
        client_error("InvalidArgumentException", op="GetShardIterator"),
        client_error(
            "ResourceNotFoundException", op="GetShardIterator"
        ),  # message below mentions the sequence number
    ],
)
def test_a_rejected_checkpoint_position_is_named_never_skipped(exc: Exception) -> None:
    if "ResourceNotFound" in str(exc):
        exc = ClientError(
            {
                "Error": {
                    "Code": "ResourceNotFoundException",
                    "Message": "Unable to find record with provided SequenceNumber 77",
                },
                "ResponseMetadata": {"HTTPStatusCode": 400},
            },
            "GetShardIterator",
        )
    fk = FakeKinesis(shards=1)
    fk.fault("GetShardIterator", exc)
    g = make_getter(fk, start=SequenceKey(77))
    with pytest.raises(InvalidPositionError, match=f"shard {S0}: .*after sequence 77"):
        g.poll(0.0)
    assert len(fk.iterator_requests) == 0
