"""What every dead-letter sink shares: the given-up record (:class:`DeadLetter`), the sink
protocol, the entry written for one record, and the sinks that keep nothing of their own
(:class:`LoggingDeadLetterSink`, ``none``) or pass some letters on
(:class:`FilteredDeadLetterSink`, ``dead_letter_on``).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from kinesis_spout.records import Record

# The logger the dead-letter module had before it became a package: log filters keep working.
log = logging.getLogger("kinesis_spout.deadletter")

REASONS = ("exhausted", "expired")
"""Why a record is given up: its retries ran out, or it grew older than ``max_record_age``."""


class DeadLetter(NamedTuple):
    """A given-up record on its way to the dead-letter target."""

    record: Record
    error: str | None
    attempts: int
    reason: str = "exhausted"


class DeadLetterSink(Protocol):
    def write_many(self, letters: Sequence[DeadLetter]) -> None:
        """Persist all ``letters`` (of one shard, in order) durably before returning:
        all or none of them (a failed call is made again with the same letters)."""
        ...

    def close(self) -> None: ...


def dead_letter_entry(
    record: Record, error: str | None, attempts: int, job: str, reason: str = "exhausted"
) -> dict[str, Any]:
    """The JSON object written for one dead-lettered record."""
    return {
        "job": job,
        "reason": reason,
        "stream": record.stream_name,
        "shard_id": record.shard_id,
        "sequence_number": record.sequence_number,
        "sub_sequence_number": record.sub_sequence_number,
        "message_id": record.message_id,
        "partition_key": record.partition_key,
        "data_base64": base64.b64encode(record.data).decode("ascii"),
        "approximate_arrival": (
            record.approximate_arrival.isoformat() if record.approximate_arrival else None
        ),
        "attempts": attempts,
        "error": error,
        "dead_lettered_at": datetime.now(UTC).isoformat(),
    }


class LoggingDeadLetterSink:
    """``dead_letter = "none"``: records are only logged (at ERROR)."""

    def __init__(self) -> None:
        self.written = 0

    def write_many(self, letters: Sequence[DeadLetter]) -> None:
        for record, error, attempts, reason in letters:
            self.written += 1
            log.error(
                "gave up on %s/%s (%s) after %d attempts: %s",
                record.stream_name,
                record.message_id,
                reason,
                attempts,
                error,
            )

    def close(self) -> None:
        return None


class FilteredDeadLetterSink:
    """``dead_letter_on``: letters whose reason is listed go to ``inner``; the
    others are only logged (they still count as done)."""

    def __init__(self, inner: DeadLetterSink, on: Iterable[str]) -> None:
        self.inner = inner
        self.on = frozenset(on)
        self.logged = LoggingDeadLetterSink()

    def write_many(self, letters: Sequence[DeadLetter]) -> None:
        kept = [d for d in letters if d.reason in self.on]
        if kept:
            self.inner.write_many(kept)
        dropped = [d for d in letters if d.reason not in self.on]
        if dropped:
            self.logged.write_many(dropped)

    def close(self) -> None:
        self.inner.close()
