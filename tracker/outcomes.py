"""What the in-flight tracker answers: fail outcomes, due retries, counters.

Also :func:`check_arguments`, the validation of the tracker's constructor.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Generic, TypeVar

from tracker.backoff import Backoff
from tracker.keys import SequenceKey

R = TypeVar("R")
"""The type of the records a tracker holds (any; None allowed)."""


class FailAction(enum.Enum):
    """What a ``fail`` (or an expiry) did."""

    RETRY = "retry"
    """A retry is scheduled at ``retry_at``; ``next_retry`` will hand it out."""
    GIVEN_UP = "given_up"
    """The retry limit is spent: the record is handed back to be dead-lettered, and is
    done once ``dead_lettered`` confirms the write."""
    IGNORED = "ignored"
    """Unknown key, already done, or already awaiting its retry: nothing changed."""


@dataclass(frozen=True, slots=True)
class FailOutcome(Generic[R]):
    """The result of one ``fail``."""

    action: FailAction
    key: SequenceKey
    record: R | None
    """The record (for RETRY and GIVEN_UP); a GIVEN_UP record is returned exactly once."""
    attempts: int
    """Deliveries so far (0 for an unknown or done key)."""
    retry_at: float | None
    """When the retry becomes due (RETRY only)."""
    error: str | None
    """The error passed to ``fail`` (or the timeout message for an expiry)."""


@dataclass(frozen=True, slots=True)
class RetryItem(Generic[R]):
    """A retry that is due: hand ``record`` out again and call ``emitted(key, ...)``."""

    key: SequenceKey
    record: R | None
    attempt: int
    """The delivery number this retry will be: 2 for the first retry."""


@dataclass(frozen=True, slots=True)
class TrackerStats:
    """A snapshot of the tracker's counters."""

    emitted: int
    """New records emitted (first deliveries)."""
    acked: int
    """Records that became done by an ack (including late acks)."""
    retried: int
    """Retry deliveries (emits of a key that awaited a retry)."""
    given_up: int
    """Records that ran out of retries (handed back for the dead-letter sink)."""
    duplicate_acks: int
    """Acks of a key not tracked and not after the latest emitted key: already done."""
    unknown_acks: int
    """Acks of a key after the latest emitted key (never emitted)."""
    ignored_fails: int
    """Fails of a key that is unknown, done or already awaiting its retry."""
    ignored_emits: int
    """Emits of a key already in flight or done, or a re-read key not after the latest."""
    expired: int
    """Deliveries failed by ``expire`` (message timeout)."""
    in_flight: int
    """Records emitted and not yet done (including those awaiting a retry)."""
    pending_retries: int
    """Records awaiting a retry."""
    late_acks: int = 0
    """Acks of a record awaiting its retry: done, the retry is cancelled (part of ``acked``)."""
    nodes: int = 0
    """Entries held in the emit-order key array (at most ``3 * in_flight + 64``)."""
    given_up_pending: int = 0
    """Records given up whose dead-letter write is not confirmed yet (part of ``in_flight``)."""


def check_arguments(
    retry_limit: int,
    max_in_flight: int | None,
    message_timeout: float | None,
    backoff: Backoff | None,
    resume_after: SequenceKey | None,
) -> None:
    """``ValueError`` naming the first bad argument of ``InflightRecordTracker``."""
    if isinstance(retry_limit, bool) or not isinstance(retry_limit, int) or retry_limit < 0:
        raise ValueError(f"retry_limit must be an int >= 0, got {retry_limit!r}")
    if max_in_flight is not None and (
        isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1
    ):
        raise ValueError(f"max_in_flight must be None or an int >= 1, got {max_in_flight!r}")
    if message_timeout is not None and (
        isinstance(message_timeout, bool)
        or not isinstance(message_timeout, int | float)
        or not 0 < message_timeout < float("inf")
    ):
        raise ValueError(
            f"message_timeout must be None or a finite number > 0, got {message_timeout!r}"
        )
    if backoff is not None and not callable(getattr(backoff, "delay", None)):
        raise ValueError(f"backoff must have a delay(attempt) method, got {backoff!r}")
    if resume_after is not None and not (
        isinstance(resume_after, SequenceKey)
        and isinstance(resume_after.sequence, int)
        and isinstance(resume_after.sub_sequence, int)
        and resume_after.sequence >= 0
        and resume_after.sub_sequence >= 0
    ):
        raise ValueError(f"resume_after must be None or a SequenceKey, got {resume_after!r}")
