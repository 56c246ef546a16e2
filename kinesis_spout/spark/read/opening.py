"""Opening shards' iterators in the driver, several at once.

The first read of a shard opens its iterator (a GetShardIterator) before its first
GetRecords: in a job's first micro-batch, one more call per shard inside the read
tasks' deadline. :func:`open_iterators` opens them in the driver instead, up to
``poll_threads`` calls at once, while the Spark session starts and the endpoint
waits anyway (:mod:`~kinesis_spout.spark.launch.early`); the plans carry them, and
the tasks go straight to GetRecords. An iterator that cannot be opened then is left
to the task (which opens it as before, with its retries); one that expires before it
is used is re-opened there, as an expired iterator always is.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from kinesis_spout.errors import KinesisError
from kinesis_spout.kinesis.getter import KinesisShardGetter

log = logging.getLogger(__name__)


def open_iterators(getters: list[KinesisShardGetter], threads: int) -> int:
    """Open the iterator of each getter, up to ``threads`` calls at once; how many
    opened. A failure is logged and left to the shard's first read."""
    if not getters:
        return 0

    def open_one(getter: KinesisShardGetter) -> bool:
        try:
            getter.open_now()
        except KinesisError as exc:
            log.info("%s: iterator left to the first read: %s", getter.shard_id, exc)
        return getter.position.iterator is not None

    with ThreadPoolExecutor(max(1, min(threads, len(getters))), "kinesis-spout-open") as pool:
        opened = sum(pool.map(open_one, getters))
    return opened
