"""The processing function of the chaos run (``bench/chaos.py``).

Every record the chaos run puts carries its unique id and a poison flag in
its payload: ``b"<id>|ok|xxxx..."`` or ``b"<id>|poison|xxxx..."``
(:func:`make_payload`). :func:`process` accepts a good record and raises
:class:`PoisonRecordError` for a poison one, on every delivery, so the spout
retries it ``retry_limit`` times and then dead-letters it.

The processed ids are not written here: the job's Parquet sink
(``sink = "parquet://DIR"``) writes every record that processed ok before
it is acked, and the auditor reads the ids back from the ``data`` column.
Run it with::

    spark-submit kinesis_spout/spark/job.py --config chaos.toml \\
        --process kinesis_spout.examples.chaos_process:process
"""

from __future__ import annotations

from typing import Protocol

from kinesis_spout.errors import KinesisSpoutError

SEPARATOR = b"|"
OK_FLAG = b"ok"
POISON_FLAG = b"poison"
ID_PREFIX = "chaos-"


class PoisonRecordError(KinesisSpoutError):
    """The record is poison: its processing fails on every delivery."""


class HasData(Protocol):
    """What :func:`process` reads: an ``InputRecord`` or a ``Record``."""

    @property
    def data(self) -> bytes: ...


def record_id(index: int) -> str:
    """The unique id of the ``index``-th record put by a chaos run."""
    return f"{ID_PREFIX}{index:07d}"


def make_payload(rid: str, poison: bool, size: int = 200) -> bytes:
    """``<id>|ok|`` or ``<id>|poison|``, padded with ``x`` to ``size`` bytes."""
    flag = POISON_FLAG if poison else OK_FLAG
    head = rid.encode("ascii") + SEPARATOR + flag + SEPARATOR
    return head + b"x" * max(0, size - len(head))


def parse_payload(data: bytes) -> tuple[str, bool]:
    """``(id, poison?)`` of a chaos payload; :class:`ValueError` naming a foreign one."""
    parts = data.split(SEPARATOR, 2)
    if len(parts) < 3 or parts[1] not in (OK_FLAG, POISON_FLAG):
        raise ValueError(f"not a chaos-run payload: {data[:40]!r}")
    return parts[0].decode("ascii"), parts[1] == POISON_FLAG


def process(record: HasData) -> None:
    """Accept a good record; raise :class:`PoisonRecordError` for a poison one (every time)."""
    rid, poison = parse_payload(record.data)
    if poison:
        raise PoisonRecordError(f"poison record {rid}")
