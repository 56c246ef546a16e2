"""Record keys: a Kinesis sequence number plus a KPL sub-sequence number, as integers."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["MAX_SEQUENCE_DIGITS", "SequenceKey"]

#: Kinesis documents sequence numbers as ``0|([1-9]\d{0,128})``: at most 129 decimal digits.
#: Real ones are 56 digits (about 2**185), so a 128-bit bound would reject them.
MAX_SEQUENCE_DIGITS = 129
_SEQUENCE_LIMIT = 10**MAX_SEQUENCE_DIGITS


class SequenceKey(NamedTuple):
    """The position of one user record in a shard, ordered as integers.

    Tuple ordering on the two integers is the shard order: never compare the
    decimal strings, since ``"9" > "10"`` lexically.  ``str(key)`` is
    ``"<sequence>"``, or ``"<sequence>:<sub_sequence>"`` when the sub-sequence is
    not 0; a message id is ``"<shardId>:" + str(key)``.  A plain record and the
    first user record of a KPL aggregate both have sub-sequence 0, which is
    unambiguous because they can never share a sequence number.
    """

    sequence: int
    """The Kinesis sequence number as an int (from a decimal string of up to 129 digits)."""
    sub_sequence: int = 0
    """The KPL sub-sequence number of a de-aggregated user record, 0 otherwise."""

    @classmethod
    def parse(cls, sequence: str, sub_sequence: int = 0) -> SequenceKey:
        """Validate and build a key from Kinesis' decimal string.

        Raises ValueError naming the bad value: the sequence must be ASCII decimal
        digits only (no sign, spaces or underscores) and at most 129 digits; the
        sub-sequence a non-negative int.
        """
        if not isinstance(sequence, str):
            raise ValueError(f"sequence must be a decimal string, got {sequence!r}")
        if not (sequence.isascii() and sequence.isdigit()):
            raise ValueError(f"sequence must contain decimal digits only, got {sequence!r}")
        value = int(sequence)
        if value >= _SEQUENCE_LIMIT:
            raise ValueError(
                f"sequence must have at most {MAX_SEQUENCE_DIGITS} digits, got {sequence!r}"
            )
        if isinstance(sub_sequence, bool) or not isinstance(sub_sequence, int) or sub_sequence < 0:
            raise ValueError(f"sub_sequence must be an int >= 0, got {sub_sequence!r}")
        return cls(value, sub_sequence)

    @classmethod
    def from_str(cls, text: str) -> SequenceKey:
        """The inverse of ``str(key)``: ``"<sequence>"`` or ``"<sequence>:<sub>"``."""
        sequence, sep, sub = text.partition(":")
        if not sep:
            return cls.parse(sequence)
        if not (sub.isascii() and sub.isdigit()):
            raise ValueError(f"sub_sequence must be decimal digits, got {sub!r} in {text!r}")
        return cls.parse(sequence, int(sub))

    def __str__(self) -> str:
        if self.sub_sequence:
            return f"{self.sequence}:{self.sub_sequence}"
        return str(self.sequence)
