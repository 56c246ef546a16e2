"""A failed record's retries as the config sets them: one value, derived in one place.

``retry_limit`` (extra deliveries), ``retry_backoff`` and ``retry_backoff_max`` (the
wait after each failed delivery, doubling, capped) and ``max_record_age`` (an older
failed record is given up as expired) decide whether and when a failed record is
delivered again. :meth:`RetryPolicy.of` derives them from the config once; the spout
builds each shard's :class:`~tracker.InflightRecordTracker` with its ``limit`` and
``backoff`` and its acks' :class:`~kinesis_spout.core.age.RecordAge` with its
``max_age``, and the Spark job's fast retries
(:class:`~kinesis_spout.spark.process.fastretry.FastRetry`, on the executors) take the same
value, so a record retried at once counts against the same limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from kinesis_spout.core.age import too_old
from tracker import Backoff, ExponentialBackoff, NoBackoff

if TYPE_CHECKING:
    from kinesis_spout.config import SpoutConfig


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The retries of a failed record (picklable: the executors get it too)."""

    limit: int = 0
    """Extra deliveries of a failing record: the tracker's ``retry_limit``."""
    backoff: Backoff = NoBackoff()
    """The wait after failed delivery ``n``, ``backoff.delay(n)``: the tracker's backoff."""
    max_age: float | None = None
    """Seconds: a failed record that arrived longer ago is given up as expired (None:
    never)."""

    @classmethod
    def of(cls, config: SpoutConfig) -> RetryPolicy:
        """``retry_limit``, ``retry_backoff`` (0: none) capped by ``retry_backoff_max``,
        and ``max_record_age`` of ``config``."""
        backoff: Backoff = NoBackoff()
        if config.retry_backoff > 0:
            backoff = ExponentialBackoff(config.retry_backoff, cap=config.retry_backoff_max)
        return cls(config.retry_limit, backoff, config.max_record_age)

    def spent(self, deliveries: int) -> bool:
        """No retry is left after ``deliveries`` deliveries (the tracker gives such a
        failed record up: :meth:`~tracker.InflightRecordTracker.fail`)."""
        return deliveries > self.limit

    def expired(self, arrival: datetime | None, now: float) -> bool:
        """A failed record that arrived at ``arrival`` is too old to be retried at ``now``
        (epoch seconds); one with no arrival time never is."""
        return self.max_age is not None and too_old(arrival, self.max_age, now)
