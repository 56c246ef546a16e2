"""Reading the one record a read task of limit 1 failed on, on the driver.

Its Python worker died on it, so no task returned its position: the driver
reads it here (one GetRecords of limit 1) to fail it in its tracker. The plan's
iterator may have expired long ago (a halving cycle can outlast the 5 minutes
of an iterator), and a call may be throttled or fail: :func:`read_alone` makes
up to :data:`ATTEMPTS` polls, re-opening the iterator after the last key read
when it expired, and backing off after throttling and 5xx answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.records import ShardBatch
from kinesis_spout.spark.readplan import ReadPlan
from tracker import Backoff

log = logging.getLogger(__name__)

ATTEMPTS = 5
"""Polls before giving up for this cycle (the next cycle tries again)."""


def read_alone(
    api: KinesisApi,
    plan: ReadPlan,
    backoff: Backoff,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[KinesisShardGetter, ShardBatch]:
    """The getter and its last poll: the record at ``plan.position`` if it could be read
    (else the batch holds no record, and its ``error`` says why)."""
    pos = plan.position
    assert pos is not None
    getter = KinesisShardGetter(
        api,
        plan.shard_id,
        backoff=backoff,
        start=pos.after,
        after_whole=pos.after_whole,
        iterator=pos.iterator,
        position=pos.initial,
        timestamp=pos.timestamp,
        limit=1,
        empty_shard_backoff=0.0,
    )
    page = ShardBatch([], 0.0)
    for attempt in range(1, ATTEMPTS + 1):
        now = clock()
        if getter.next_poll_at > now:
            sleep(getter.next_poll_at - now)
        page = getter.poll(clock())
        if page.records or page.ended or (page.error is None and getter.caught_up):
            return getter, page
        if page.error is not None:
            log.info(
                "shard %s: reading the record that fails alone, attempt %d: %s",
                plan.shard_id,
                attempt,
                page.error,
            )
    return getter, page
