"""Processing functions of the Spark-job tests.

They run on executors (separate Python processes), so they report what they
saw through files. The conftest registers this module with cloudpickle by
value (the executors cannot import test modules); the spark-submit test
loads it by path (``--process .../spark_job_helpers.py:kill_test_job``),
and the job ships it to the executors with ``addPyFile``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kinesis_spout.config import SpoutConfig
from kinesis_spout.spark.processing import (
    InputRecord,
    RecordProcessor,
    per_record,
    processor_factory,
)

POISON = b"POISON"


def record_deliveries(directory: str) -> Callable[[InputRecord], None]:
    """A per-record function that leaves one file per delivery of a poison
    record (``<message id>.<attempt>.<random>``) and fails it."""

    def process(record: InputRecord) -> None:
        if record.data.startswith(POISON):
            name = f"{record.message_id}.{record.attempt}.{uuid.uuid4().hex}"
            Path(directory, name).touch()
            raise ValueError(f"poison record {record.data[:20]!r}")

    return process


def slow_ok(record: InputRecord) -> None:
    """Every record is fine, at ~2 ms each (so a kill lands mid-stream)."""
    time.sleep(0.002)


@processor_factory
def kill_test_job(config: SpoutConfig) -> RecordProcessor:
    return per_record(slow_ok, name="slow_ok")


def words_with_a_bad_one(record: InputRecord) -> list[str]:
    return record.data.decode().split()


def failing_word_sink(bad: str) -> Callable[[Any], Any]:
    """A fan-out sink (a DataFrame transform) that cannot write ``bad``."""

    def sink(words: Any) -> Any:
        from pyspark.sql import functions as F

        return words.select(
            "_root",
            "_id",
            (F.col("word") != F.lit(bad)).alias("status"),
            F.when(F.col("word") == F.lit(bad), F.lit(f"cannot store {bad!r}")).alias("error"),
        )

    return sink


def accept(record: InputRecord) -> None:
    """Every record is fine, at once."""
    return None


KILLER = b"KILLER"


def log_deliveries(
    directory: str, *, fail: bytes = POISON, kill: bytes = KILLER
) -> Callable[[InputRecord], None]:
    """A per-record function that leaves one file per delivery,
    ``<shard>.<sequence>.<sub>.<attempt>.<partition>.<time ns>.<random>``; records
    starting with ``fail`` raise, records starting with ``kill`` end the Python worker."""

    def process(record: InputRecord) -> None:
        import os

        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else -1
        name = (
            f"{record.shard_id}.{record.sequence_number}.{record.sub_sequence_number}."
            f"{record.attempt}.{part}.{time.time_ns()}.{uuid.uuid4().hex[:8]}"
        )
        Path(directory, name).touch()
        if record.data.startswith(kill):
            os._exit(3)
        if record.data.startswith(fail):
            raise ValueError(f"poison record {record.data[:20]!r}")

    return process


def read_deliveries(directory: str | Path) -> list[tuple[str, str, int, int, int]]:
    """(shard, sequence, attempt, partition, time ns) per delivery, by time."""
    out = []
    for p in Path(directory).iterdir():
        shard, seq, _sub, attempt, part, t, _ = p.name.split(".")
        out.append((shard, seq, int(attempt), int(part), int(t)))
    return sorted(out, key=lambda d: d[4])
