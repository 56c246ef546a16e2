"""Fast retries of the transform style: the failed records re-run at once.

The per-record style retries a failing record inside its own task
(:mod:`kinesis_spout.spark.process.fastretry`). A DataFrame transform sees a whole
micro-batch, so the driver instead re-runs the failed subset as a small
follow-up Spark job, right after the batch, while the policy allows (retries
left, delay at most ``fast_retry_max_delay``, not older than
``max_record_age``). The outcomes of the batch are updated in place: a record
that passes becomes ok, one that still fails carries its last delivery number
(``Statuses.attempts``), so the tracker counts every delivery. A follow-up job
that fails as a whole ends the fast retries of that batch: its records are
failed as they were, and retried by later batches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import pyarrow as pa

from kinesis_spout.records import Record
from kinesis_spout.spark.process.arrow import Statuses, format_error, records_to_arrow
from kinesis_spout.spark.process.fastretry import FastRetry
from kinesis_spout.spark.process.runner import BatchOutcome

log = logging.getLogger(__name__)


def retry_failed(
    records: Sequence[Record],
    outcomes: Sequence[BatchOutcome],
    run: Callable[[pa.Table], BatchOutcome],
    policy: FastRetry,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Re-run the failed rows of ``outcomes`` (rows index ``records``) while the
    policy allows; returns the extra deliveries made."""
    owner: dict[int, Statuses] = {}
    last: dict[int, Record] = {}
    for o in outcomes:
        st = o.statuses
        for r in st.failed_rows.tolist():
            owner[r] = st
            rec = records[r]
            tried = st.attempts.get(r, rec.attempt)  # retries made in the task count
            last[r] = rec if tried == rec.attempt else replace(rec, attempt=tried)
    extra = 0
    while True:
        due = [r for r in owner if policy.may_retry(last[r].attempt, last[r].approximate_arrival)]
        if not due:
            return extra
        wait = max(policy.delay(last[r].attempt) for r in due)
        if wait > 0:
            sleep(wait)
        again = [replace(last[r], attempt=last[r].attempt + 1) for r in due]
        try:
            back = run(records_to_arrow(again)).statuses
        except Exception as exc:  # the follow-up job failed: later batches retry them
            log.warning("fast retry of %d records failed as a job: %s", len(due), format_error(exc))
            return extra
        extra += len(due)
        for j, r in enumerate(due):
            last[r] = again[j]
            mine = owner[r]
            mine.attempts[r] = again[j].attempt
            if back.ok[j]:
                mine.ok[r - mine.start] = True
                mine.errors.pop(r, None)
                del owner[r]
            else:
                mine.errors[r] = back.errors.get(j, "failed")
