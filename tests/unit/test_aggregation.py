"""KPL de-aggregation, checked against records built by aws-kinesis-agg's aggregator."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from aws_kinesis_agg.aggregator import RecordAggregator
from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis_spout.kinesis.aggregation import MAGIC, deaggregate, is_aggregated
from kinesis_spout.kinesis.api import to_records
from tracker import SequenceKey


def kpl(pairs: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    agg = RecordAggregator()
    for pk, data in pairs:
        assert agg.add_user_record(pk, data) is None
    pk, _ehk, payload = agg.clear_and_get().get_contents()
    return pk, payload


def test_deaggregates_user_records_with_their_own_keys() -> None:
    pairs = [("a", b"1"), ("b", b""), ("a", b"\x00\xff" * 100), ("c", "é".encode())]
    pk, payload = kpl(pairs)
    assert is_aggregated(payload)
    assert deaggregate(payload, pk) == pairs


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=20), st.binary(max_size=300)),
        min_size=1,
        max_size=30,
    )
)
def test_any_aggregate_round_trips(pairs: list[tuple[str, bytes]]) -> None:
    pk, payload = kpl(pairs)
    assert deaggregate(payload, pk) == pairs


def test_plain_records_pass_through() -> None:
    assert deaggregate(b"hello", "k") == [("k", b"hello")]
    assert not is_aggregated(b"hello")


def test_bad_checksum_or_body_is_passed_through_whole_never_dropped() -> None:
    _pk, payload = kpl([("a", b"1"), ("b", b"2")])
    tampered = payload[:-1] + bytes([payload[-1] ^ 1])
    assert deaggregate(tampered, "k") == [("k", tampered)]
    body = b"\x1a\x05\x08"  # field 3, length 5, but only one byte follows
    broken = MAGIC + body + hashlib.md5(body).digest()
    assert deaggregate(broken, "k") == [("k", broken)]
    assert deaggregate(MAGIC, "k") == [("k", MAGIC)]


def raw(seq: str, data: bytes, pk: str = "pk") -> dict[str, Any]:
    return {
        "SequenceNumber": seq,
        "Data": data,
        "PartitionKey": pk,
        "ApproximateArrivalTimestamp": datetime(2026, 1, 1, tzinfo=UTC),
    }


def test_to_records_numbers_sub_records_from_zero() -> None:
    pk, payload = kpl([("x", b"1"), ("y", b"2"), ("z", b"3")])
    recs = to_records("s", "sh", [raw("7", b"plain"), raw("8", payload, pk)], 42)
    assert [(r.sequence_number, r.sub_sequence_number, r.partition_key, r.data) for r in recs] == [
        ("7", 0, "pk", b"plain"),
        ("8", 0, "x", b"1"),
        ("8", 1, "y", b"2"),
        ("8", 2, "z", b"3"),
    ]
    assert [r.key for r in recs] == [
        SequenceKey(7),
        SequenceKey(8, 0),
        SequenceKey(8, 1),
        SequenceKey(8, 2),
    ]
    assert all(r.millis_behind_latest == 42 and r.attempt == 1 for r in recs)
    assert [r.message_id for r in recs] == ["sh:7", "sh:8", "sh:8:1", "sh:8:2"]


def test_to_records_keeps_a_corrupt_aggregate_as_one_record() -> None:
    _pk, payload = kpl([("x", b"1"), ("y", b"2")])
    bad = payload[:-2] + b"\x00\x00"
    (r,) = to_records("s", "sh", [raw("9", bad)])
    assert r.data == bad and r.sub_sequence_number == 0
