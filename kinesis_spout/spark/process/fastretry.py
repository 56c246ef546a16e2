"""Fast retries: a failing record is run again at once, where it failed.

Without them a failed record waits for a later micro-batch for each retry, and
a poison record (one that fails every time) holds its shard's replay window
through ``retry_limit`` further batches. With ``fast_retries`` (the default)
the per-record function is called again right away, in the same Spark task,
while the retry delay of that attempt (``retry_backoff``, doubling, capped by
``retry_backoff_max``) is at most ``fast_retry_max_delay``, the record is not
older than ``max_record_age``, and its retries are not spent: the limits of the
driver's trackers, from the same :class:`~kinesis_spout.core.retrypolicy.RetryPolicy`
(:attr:`FastRetry.retry`), never derived again here. The task then
reports the record's last delivery number; the driver's tracker counts those
deliveries, so a record that failed every time is dead-lettered in the same
batch, and one that passed on a later try is acked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kinesis_spout.core.retrypolicy import RetryPolicy

if TYPE_CHECKING:
    from kinesis_spout.config import SpoutConfig
    from kinesis_spout.metrics import MetricsCollector
    from kinesis_spout.records import Record


def count_fast_retries(
    records: Sequence[Record], attempts: Mapping[int, int], metrics: MetricsCollector
) -> int:
    """Extra deliveries made by fast retries (``attempts``: row -> last delivery of the
    records that failed once), counted as ``retries`` of their shards; their total."""
    total = 0
    for row, attempt in attempts.items():
        extra = attempt - records[row].attempt
        if extra > 0:
            total += extra
            metrics.increment("retries", extra, shard=records[row].shard_id)
    return total


@dataclass(frozen=True, slots=True)
class FastRetry:
    """The fast-retry policy of a job (picklable; shipped to the executors): the
    job's :class:`~kinesis_spout.core.retrypolicy.RetryPolicy`, the one its trackers
    use, and the longest wait a retry inside the task may take."""

    retry: RetryPolicy = RetryPolicy()
    """The retry limit, backoff and record age (those of the driver's trackers)."""
    max_delay: float = 0.0
    """``fast_retry_max_delay``: a retry that waits longer is left to a later batch."""
    enabled: bool = False

    @classmethod
    def of(cls, config: SpoutConfig) -> FastRetry:
        """``config``'s fast retries, within its :meth:`RetryPolicy.of
        <kinesis_spout.core.retrypolicy.RetryPolicy.of>` (the spout's trackers take
        theirs from there too)."""
        return cls(RetryPolicy.of(config), config.fast_retry_max_delay, config.fast_retries)

    def delay(self, attempt: int) -> float:
        """The wait before the retry that follows delivery ``attempt``."""
        return self.retry.backoff.delay(attempt)

    def call(
        self,
        fn: Callable[[Record], Any],
        record: Record,
        format_error: Callable[[BaseException], str],
        sleep: Callable[[float], None] = time.sleep,
    ) -> tuple[str | None, int]:
        """Run ``fn`` on ``record``, retrying at once where allowed:
        ``(None or the last error, the last delivery number)``.

        ``Exception`` fails a try; ``BaseException`` propagates (it fails the task).
        """
        attempt = record.attempt
        while True:
            try:
                fn(record)
            except Exception as exc:  # any user error fails the try
                error = format_error(exc)
            else:
                return None, attempt
            if not self.may_retry(attempt, record.approximate_arrival):
                return error, attempt
            wait = self.delay(attempt)
            if wait > 0:
                sleep(wait)
            attempt += 1
            record = replace(record, attempt=attempt)

    def may_retry(self, attempt: int, arrival: datetime | None) -> bool:
        """May a record that failed delivery ``attempt`` be retried at once?"""
        if not self.enabled or self.retry.spent(attempt):
            return False
        if self.delay(attempt) > self.max_delay:
            return False
        return not self.retry.expired(arrival, time.time())
