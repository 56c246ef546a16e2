"""SequenceKey: parsing, ordering, string form."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracker import MAX_SEQUENCE_DIGITS, SequenceKey


def test_parse_and_str_round_trip() -> None:
    assert SequenceKey.parse("0") == SequenceKey(0, 0)
    assert str(SequenceKey.parse("12345")) == "12345"
    assert str(SequenceKey.parse("12345", 7)) == "12345:7"
    assert SequenceKey.from_str("12345:7") == SequenceKey(12345, 7)
    assert SequenceKey.from_str("12345") == SequenceKey(12345, 0)
    assert SequenceKey(5) == SequenceKey(5, 0)


def test_real_kinesis_sequence_numbers_fit() -> None:
    real = "49590338271490256608559692538361571095921575989136588898"
    key = SequenceKey.parse(real)
    assert key.sequence > 2**128
    assert str(key) == real
    widest = "9" * MAX_SEQUENCE_DIGITS
    assert str(SequenceKey.parse(widest)) == widest


@pytest.mark.parametrize(
    ("sequence", "sub", "name"),
    [
        ("", 0, "sequence"),
        ("-1", 0, "sequence"),
        ("+1", 0, "sequence"),
        (" 1", 0, "sequence"),
        ("1_000", 0, "sequence"),
        ("12a", 0, "sequence"),
        ("\u0661\u0662", 0, "sequence"),  # Arabic-Indic digits: int() accepts them, we do not
        ("1" * (MAX_SEQUENCE_DIGITS + 1), 0, "sequence"),
        (12, 0, "sequence"),
        ("1", -1, "sub_sequence"),
        ("1", 1.0, "sub_sequence"),
        ("1", True, "sub_sequence"),
    ],
)
def test_parse_rejects_bad_values_naming_them(sequence: object, sub: object, name: str) -> None:
    with pytest.raises(ValueError, match=name) as info:
        SequenceKey.parse(sequence, sub)  # type: ignore[arg-type]
    assert repr(sequence if name == "sequence" else sub)[:20] in str(info.value)


@pytest.mark.parametrize("text", ["", ":", "1:", "1:x", "1:-2", "a:1", "1:2:3"])
def test_from_str_rejects_malformed_ids(text: str) -> None:
    with pytest.raises(ValueError):
        SequenceKey.from_str(text)


@given(st.integers(0, 10**MAX_SEQUENCE_DIGITS - 1), st.integers(0, 10**9))
def test_str_round_trips(sequence: int, sub: int) -> None:
    key = SequenceKey(sequence, sub)
    assert SequenceKey.from_str(str(key)) == key
    assert SequenceKey.parse(str(sequence), sub) == key


@given(st.integers(0, 2**200), st.integers(0, 2**200), st.integers(0, 9), st.integers(0, 9))
def test_order_is_numeric_on_sequence_then_sub_sequence(a: int, b: int, sa: int, sb: int) -> None:
    ka, kb = SequenceKey.parse(str(a), sa), SequenceKey.parse(str(b), sb)
    assert (ka < kb) == ((a, sa) < (b, sb))
