"""Pure reliability logic for kinesis-spout: no I/O, no clock, no sleep.

* ``InflightRecordTracker``: per shard, the records emitted and not yet done,
  their retries and dead letters, and the checkpoint below which all is done.
* ``Acker``: Storm's XOR ledger for trees of derived records.
* ``SequenceKey``: a sequence number and KPL sub-sequence number, as ints.
* Backoff policies for retries and throttling.

See ``docs/tracker.md``.
"""

from __future__ import annotations

from tracker.acker import Acker, AckerEvent, AckerEventKind, AckerStats
from tracker.backoff import Backoff, ExponentialBackoff, JitteredBackoff, NoBackoff
from tracker.inflight import (
    FailAction,
    FailOutcome,
    InflightRecordTracker,
    RetryItem,
    TrackerStats,
)
from tracker.keys import MAX_SEQUENCE_DIGITS, SequenceKey

__all__ = [
    "MAX_SEQUENCE_DIGITS",
    "Acker",
    "AckerEvent",
    "AckerEventKind",
    "AckerStats",
    "Backoff",
    "ExponentialBackoff",
    "FailAction",
    "FailOutcome",
    "InflightRecordTracker",
    "JitteredBackoff",
    "NoBackoff",
    "RetryItem",
    "SequenceKey",
    "TrackerStats",
]
