"""What the emulator allows the Spark job's reads: a stream read whole by the read
tasks' own code, with no Spark and no processing.

``spark_bench.py --shards`` sets the job's records/s at 128 shards against 4. On moto
every call costs its one Python process a few milliseconds of CPU, and 128 shards need
an iterator and a page each where 4 need a few large pages. :func:`read_floor` reads
the stream as ``local[2]``'s two read tasks do (two processes, each half of the shards,
:func:`kinesis_spout.spark.task.read_shards` with the library's ``poll_threads``) and
counts the records; its records/s at each shard count is the most a job reading through
that emulator could do, and their ratio the shard scaling the emulator leaves it.
"""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.queues import Queue
from typing import Any

from kinesis_spout.config import SpoutConfig
from kinesis_spout.records import GetterPosition, Record
from kinesis_spout.spark.plan import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.task import Read, read_shards

TASKS = 2
"""The read tasks of a micro-batch on ``local[2]`` (``shards_per_task`` 0: one per core)."""


def read_floor(client: Any, endpoint: str, stream: str, records: int) -> float:
    """Records/s of ``TASKS`` processes reading every record of ``stream`` from
    TRIM_HORIZON, each its share of the shards with the read tasks' code."""
    shards = [s["ShardId"] for s in client.list_shards(StreamName=stream)["Shards"]]
    ctx = multiprocessing.get_context("fork")
    counts: Queue[int] = ctx.Queue()
    tasks = [
        ctx.Process(target=_task, args=(endpoint, stream, shards[i::TASKS], records, counts))
        for i in range(TASKS)
    ]
    start = time.perf_counter()
    for task in tasks:
        task.start()
    for task in tasks:
        task.join(600)
    elapsed = time.perf_counter() - start
    failed = [task.exitcode for task in tasks if task.exitcode != 0]
    if failed:
        raise RuntimeError(f"the read floor's tasks of {stream} ended with {failed}")
    read = sum(counts.get(timeout=10) for _ in tasks)
    if read != records:
        raise RuntimeError(f"the read floor read {read} records of {stream}, expected {records}")
    return read / elapsed


def _task(endpoint: str, stream: str, shards: list[str], limit: int, out: Queue[int]) -> None:
    """One read task's shards read to their tip (no deadline cuts them), records counted."""
    config = SpoutConfig(stream_name=stream, endpoint_url=endpoint, batch_max_wait=600.0)
    settings = ReadSettings.of(config)
    read = [0]

    def count(got: list[Record]) -> None:
        read[0] += len(got)

    plans = [
        ReadPlan(i, stream, shard, GetterPosition(), limit=limit) for i, shard in enumerate(shards)
    ]
    reads: list[Read] = [(p, count, ReadResult(p.task, stream, p.shard_id)) for p in plans]
    read_shards(reads, settings)
    out.put(read[0])
