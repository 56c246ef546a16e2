"""Hole 10: sequence numbers as Kinesis has them, 56 digits, and up to 129 digits.

The docs spoke of "128-bit" sequence numbers; real ones have 56 decimal digits
(about 2**185) and the API allows up to 129 digits. Every layer handles both.
"""

from __future__ import annotations

import pytest

from kinesis_spout.checkpoint.codec import decode_checkpoint, encode_checkpoint
from kinesis_spout.records import Checkpoint, message_id, parse_message_id
from tracker import InflightRecordTracker, SequenceKey

REAL = "49590338271490256608559692538361571095921575989136588898"  # 56 digits
LONGEST = "9" * 129


def test_keys_of_56_and_129_digits_parse_and_order_as_numbers() -> None:
    real, longest = SequenceKey.parse(REAL), SequenceKey.parse(LONGEST)
    assert real.sequence == int(REAL) and real.sequence > 2**128
    assert longest.sequence == 10**129 - 1
    assert real < longest < SequenceKey.parse(LONGEST, 1)
    with pytest.raises(ValueError):
        SequenceKey.parse("1" + "0" * 129)  # 130 digits


def test_the_tracker_checkpoints_past_2_to_the_128() -> None:
    t: InflightRecordTracker[None] = InflightRecordTracker(retry_limit=0)
    keys = [SequenceKey(int(REAL) + i) for i in range(3)] + [SequenceKey.parse(LONGEST)]
    for k in keys:
        assert t.emitted(k)
    assert t.ack_many(reversed(keys)) == 4
    assert t.checkpoint == SequenceKey.parse(LONGEST)


def test_message_ids_and_stored_checkpoints_keep_every_digit() -> None:
    key = SequenceKey.parse(LONGEST, 7)
    mid = message_id("shardId-000000000001", key)
    assert parse_message_id(mid) == (None, "shardId-000000000001", key)
    cp = Checkpoint("orders", "shardId-000000000001", LONGEST, 7, job_name="j")
    back = decode_checkpoint(
        encode_checkpoint(cp), where="t", stream="orders", shard="shardId-000000000001", job="j"
    )
    assert back.sequence_number == LONGEST and back.key == key
