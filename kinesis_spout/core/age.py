"""``max_record_age``: a failed record older than this is given up as expired.

The age is measured from the record's approximate arrival timestamp (set by
Kinesis) to the wall clock of the process deciding its retry. A record with
no arrival time never expires.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from kinesis_spout.records import Record


class RecordAge:
    """Tells whether a record is too old to be retried (``max_seconds`` None: never)."""

    __slots__ = ("max_seconds", "wall")

    def __init__(self, max_seconds: float | None, wall: Callable[[], float] = time.time) -> None:
        self.max_seconds = max_seconds
        self.wall = wall

    def expired(self, record: Record | None) -> bool:
        if self.max_seconds is None or record is None:
            return False
        return too_old(record.approximate_arrival, self.max_seconds, self.wall())

    def __bool__(self) -> bool:
        return self.max_seconds is not None


def too_old(arrival: datetime | None, max_seconds: float, now: float) -> bool:
    """True when ``arrival`` lies more than ``max_seconds`` before ``now`` (epoch seconds)."""
    return arrival is not None and now - arrival.timestamp() > max_seconds
