"""Hole 3: a KPL aggregate that holds no user records, and corrupt aggregates.

An empty aggregate (valid magic, body and checksum, zero records) used to make
``to_records`` index ``parts[0]`` of an empty list: an IndexError on every read
of the shard, which then never moved.  It is skipped and counted, and its
sequence counts as done for the checkpoint.  A corrupt aggregate (bad checksum
or body) is handed on as one plain record, as the KCL does, and counted.
"""

from __future__ import annotations

import hashlib

from test_aggregation import kpl, raw
from test_spout import Rig, S

from kinesis_spout.kinesis.aggregation import MAGIC, deaggregate
from kinesis_spout.kinesis.api import AggregateCounts, to_records
from tracker import SequenceKey

EMPTY_AGGREGATE = MAGIC + hashlib.md5(b"").digest()
# An aggregate with a partition key table but no records.
KEYS_ONLY_BODY = b"\x0a\x01k"
KEYS_ONLY_AGGREGATE = MAGIC + KEYS_ONLY_BODY + hashlib.md5(KEYS_ONLY_BODY).digest()


def test_an_empty_aggregate_deaggregates_to_nothing() -> None:
    assert deaggregate(EMPTY_AGGREGATE, "k") == []
    assert deaggregate(KEYS_ONLY_AGGREGATE, "k") == []


def test_to_records_skips_an_empty_aggregate_and_counts_it() -> None:
    counts = AggregateCounts()
    recs = to_records(
        "s",
        "sh",
        [raw("5", b"a"), raw("6", EMPTY_AGGREGATE), raw("7", KEYS_ONLY_AGGREGATE), raw("8", b"b")],
        counts=counts,
    )
    assert [r.sequence_number for r in recs] == ["5", "8"]
    assert counts.skipped == [SequenceKey(6), SequenceKey(7)]
    assert counts.corrupt == 0


def test_to_records_counts_a_corrupt_aggregate_handed_on_whole() -> None:
    _pk, payload = kpl([("x", b"1"), ("y", b"2")])
    bad = payload[:-2] + b"\x00\x00"
    counts = AggregateCounts()
    (r,) = to_records("s", "sh", [raw("9", bad), raw("10", b"plain")][:1], counts=counts)
    assert r.data == bad and r.sub_sequence_number == 0
    assert counts.corrupt == 1 and counts.skipped == []


def test_the_spout_reads_past_an_empty_aggregate_and_checkpoints_it() -> None:
    r = Rig(shards=1)
    r.kinesis.put(S[0], b"first")
    r.kinesis.put(S[0], EMPTY_AGGREGATE)
    r.kinesis.put(S[0], b"second")
    tail = r.kinesis.put(S[0], EMPTY_AGGREGATE)  # the last record of the shard so far
    r.open()
    got = r.drain()
    assert [x.data for x in got] == [b"first", b"second"]
    r.spout.checkpoint(force=True)
    cp = r.cp(S[0])
    # Everything is done, the trailing empty aggregate included: no re-read on resume.
    assert cp is not None and cp.sequence_number == tail
    assert r.metrics.counters.get(("empty_aggregates_skipped", S[0]), 0) == 2


def test_an_aggregate_followed_by_empty_ones_still_holds_its_first_record_back() -> None:
    """A page of one 2-record aggregate and two empty ones has no more records than
    Kinesis records: the aggregate must still be known, or a checkpoint at its first
    user record would resume after the whole aggregate and skip the second."""
    r = Rig(shards=1)
    pk, payload = kpl([("x", b"u0"), ("y", b"u1")])
    seq = r.kinesis.put(S[0], payload)
    r.kinesis.put(S[0], EMPTY_AGGREGATE)
    r.kinesis.put(S[0], EMPTY_AGGREGATE)
    r.open()
    first, second = r.spout.next_batch(10)
    assert (first.sequence_number, first.sub_sequence_number) == (seq, 0)
    r.spout.ack(first)
    r.spout.checkpoint(force=True)
    assert r.cp(S[0]) is None  # (seq, 0) would mean "the whole aggregate is done"
    r.spout.ack(second)
    r.spout.close()
    cp = r.cp(S[0])
    assert cp is not None and int(cp.sequence_number or 0) > int(seq)
