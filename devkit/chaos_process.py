"""The processing function of the chaos run (``bench/chaos.py``).

Every record the chaos run puts carries its unique id and a flag in its
payload: ``b"<id>|ok|xxxx..."``, ``b"<id>|poison|xxxx..."`` or
``b"<id>|kill|xxxx..."`` (:func:`make_payload`). :func:`process` accepts a
good record, raises :class:`PoisonRecordError` for a poison one and ends its
Python worker (``os._exit``) for a killer, on every delivery, so the job
retries it ``retry_limit`` times and then dead-letters it. A corrupt KPL
aggregate (``--kpl``) is handed on whole: the KPL magic, then a payload.

The processed ids are not written here: the job's Parquet sink
(``sink = "parquet://DIR"``) writes every record that processed ok before
it is acked, and the auditor reads the ids back from the ``data`` column.
Run it with::

    spark-submit kinesis_spout/spark/job.py --config chaos.toml \\
        --process devkit.chaos_process:process
"""

from __future__ import annotations

import os
from typing import Protocol

from kinesis_spout.config import SpoutConfig
from kinesis_spout.errors import ConfigError, KinesisSpoutError
from kinesis_spout.kinesis.aggregation import MAGIC
from kinesis_spout.spark.process.styles import (
    FanOutProcessor,
    InputRecord,
    fan_out,
    processor_factory,
)

SEPARATOR = b"|"
OK_FLAG = b"ok"
POISON_FLAG = b"poison"
KILL_FLAG = b"kill"
FLAGS = (OK_FLAG, POISON_FLAG, KILL_FLAG)
ID_PREFIX = "chaos-"


class PoisonRecordError(KinesisSpoutError):
    """The record is poison: its processing fails on every delivery."""


class HasData(Protocol):
    """What :func:`process` reads of a record (a ``Record``, what per-record functions get)."""

    @property
    def data(self) -> bytes: ...


def record_id(index: int) -> str:
    """The unique id of the ``index``-th record put by a chaos run."""
    return f"{ID_PREFIX}{index:07d}"


def make_payload(rid: str, poison: bool, size: int = 200, *, kill: bool = False) -> bytes:
    """``<id>|ok|``, ``<id>|poison|`` or ``<id>|kill|``, padded with ``x`` to ``size`` bytes."""
    flag = KILL_FLAG if kill else POISON_FLAG if poison else OK_FLAG
    head = rid.encode("ascii") + SEPARATOR + flag + SEPARATOR
    return head + b"x" * max(0, size - len(head))


def parse_flag(data: bytes) -> tuple[str, bytes]:
    """``(id, flag)`` of a chaos payload (also inside a corrupt aggregate handed on
    whole); :class:`ValueError` naming a foreign one."""
    if data.startswith(MAGIC):
        data = data[len(MAGIC) :]
    parts = data.split(SEPARATOR, 2)
    if len(parts) < 3 or parts[1] not in FLAGS:
        raise ValueError(f"not a chaos-run payload: {data[:40]!r}")
    return parts[0].decode("ascii"), parts[1]


def parse_payload(data: bytes) -> tuple[str, bool]:
    """``(id, failing?)`` of a chaos payload: failing = poison or killer."""
    rid, flag = parse_flag(data)
    return rid, flag != OK_FLAG


def process(record: HasData) -> None:
    """Accept a good record; raise :class:`PoisonRecordError` for a poison one and end the
    Python worker for a killer (every time)."""
    rid, flag = parse_flag(record.data)
    if flag == KILL_FLAG:
        os._exit(3)
    if flag == POISON_FLAG:
        raise PoisonRecordError(f"poison record {rid}")


WORDS_SCHEMA = (
    "shardId string, sequenceNumber string, subSequenceNumber long, data binary, word string"
)
"""The fan-out's derived records: the source's keys and payload, and one of its words."""


def split_words(record: InputRecord) -> list[tuple[str, str, int, bytes, str]]:
    """The fan-out's emit: :func:`process`, then the record's words (its id and its flag),
    each a derived record carrying the source's keys."""
    process(record)
    rid, flag = parse_flag(record.data)
    keys = (record.shard_id, record.sequence_number, record.sub_sequence_number, record.data)
    return [(*keys, rid), (*keys, flag.decode("ascii"))]


@processor_factory
def fan_out_job(config: SpoutConfig) -> FanOutProcessor:
    """The chaos run's fan-out: :func:`split_words`, anchored to its record, written by
    the job's Parquet sink and counted by a word-count sink into ``counts`` next to the
    sink's folder (the record is acked when both wrote all its words)."""
    from pathlib import Path

    from kinesis_spout.examples.wordcount import WordCountSink

    if not config.sink.startswith("parquet://"):
        raise ConfigError("sink", config.sink, "parquet://DIR (the chaos run's fan-out)")
    counts = Path(config.sink[len("parquet://") :]).with_name("counts")
    return fan_out(split_words, WORDS_SCHEMA, [WordCountSink(counts)], name="chaos-words")
