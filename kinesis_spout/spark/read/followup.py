"""Fast retries of a transform: its failed records run again at once, in the micro-batch.

A per-record function retries a failing record inside its own task
(:mod:`kinesis_spout.spark.process.fastretry`). A DataFrame transform sees a whole
micro-batch, so its failed records run again as a follow-up Spark job of retry plans,
right after the micro-batch's job, while the policy allows (retries left, a delay of at
most ``fast_retry_max_delay``, not older than ``max_record_age``). The results are
updated in place: a record that passes becomes ok, one that still fails carries its
last delivery number, so its tracker counts every delivery. A follow-up job that fails
ends the fast retries of the micro-batch: its records stay failed as they were, and are
retried by later micro-batches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from kinesis_spout.records import Record
from kinesis_spout.spark.plan import ReadPlan, ReadResult
from kinesis_spout.spark.process.arrow import format_error
from kinesis_spout.spark.process.fastretry import FastRetry

log = logging.getLogger(__name__)

_Failed = tuple[ReadResult, int]
"""A failed record: the result that holds it, and its index there."""


def follow_up(
    results: list[ReadResult],
    run: Callable[[list[ReadPlan]], list[ReadResult]],
    policy: FastRetry,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Run the failed records of ``results`` again (``run``: a Spark job of retry plans)
    while ``policy`` allows; the extra deliveries made."""
    failed: list[_Failed] = [(res, i) for res in results for i in sorted(res.failed)]
    extra = 0
    while True:
        due = [(res, i) for res, i in failed if _may_retry(policy, res.failed[i])]
        if not due:
            return extra
        wait = max(policy.delay(res.failed[i].attempt) for res, i in due)
        if wait > 0:
            sleep(wait)
        plans, where = _plans(due)
        try:
            back = run(plans)
        except Exception as exc:  # later micro-batches retry them
            log.warning("fast retry of %d records failed as a job: %s", len(due), format_error(exc))
            return extra
        extra += len(due)
        for plan_back in back:
            for j, again in enumerate(where[plan_back.task]):
                res, i = again
                res.retried += 1
                res.failed[i] = replace(res.failed[i], attempt=res.failed[i].attempt + 1)
                if plan_back.ok[j]:
                    res.ok[i] = 1
                    del res.failed[i]
                    res.errors.pop(i, None)
                else:
                    res.errors[i] = plan_back.errors.get(j, "failed")
        failed = [(res, i) for res, i in failed if i in res.failed]


def _may_retry(policy: FastRetry, record: Record) -> bool:
    return policy.may_retry(record.attempt, record.approximate_arrival)


def _plans(due: list[_Failed]) -> tuple[list[ReadPlan], dict[int, list[_Failed]]]:
    """One retry plan per shard of the records ``due`` (their next delivery), numbered
    from 1; what each plan's records are in the results."""
    by_shard: dict[tuple[str, str], list[_Failed]] = {}
    for res, i in due:
        by_shard.setdefault(res.key, []).append((res, i))
    plans: list[ReadPlan] = []
    where: dict[int, list[_Failed]] = {}
    for task, ((stream, shard), items) in enumerate(by_shard.items(), start=1):
        retries = tuple(
            replace(res.failed[i], attempt=res.failed[i].attempt + 1) for res, i in items
        )
        plans.append(ReadPlan(task, stream, shard, None, retries=retries))
        where[task] = items
    return plans, where
