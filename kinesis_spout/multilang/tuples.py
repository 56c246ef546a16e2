"""What the adapter reads from a spout and writes to Storm: the spout's shape
(:class:`SpoutLike`, :class:`SpoutRecord`) and the emitted tuple's fields and encoding."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

OUTPUT_FIELDS: tuple[str, ...] = (
    "data",
    "encoding",
    "partition_key",
    "shard_id",
    "sequence_number",
    "sub_sequence_number",
    "attempt",
    "approximate_arrival_ms",
)
"""The fields of every emitted tuple, in order (declare them in the Java ShellSpout)."""


class SpoutRecord(Protocol):
    """What the adapter reads from a record (:class:`kinesis_spout.records.Record`)."""

    @property
    def message_id(self) -> str: ...
    @property
    def data(self) -> bytes: ...
    @property
    def partition_key(self) -> str: ...
    @property
    def shard_id(self) -> str: ...
    @property
    def sequence_number(self) -> str: ...
    @property
    def sub_sequence_number(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def approximate_arrival(self) -> datetime | None: ...


class SpoutLike(Protocol):
    """The part of :class:`kinesis_spout.spout.KinesisSpout` the adapter drives."""

    def open(self) -> None: ...
    def next_batch(self, max_records: int) -> Sequence[SpoutRecord]: ...
    def poll_delay(self) -> float: ...
    def ack(self, message_id: str) -> object: ...
    def fail(self, message_id: str, error: str | None = None) -> object: ...
    def checkpoint(self, force: bool = False) -> object: ...
    def activate(self) -> None: ...
    def deactivate(self) -> None: ...
    def close(self) -> None: ...


def encode_tuple(record: SpoutRecord, data_encoding: str = "auto") -> list[Any]:
    """The values of an emitted tuple, in :data:`OUTPUT_FIELDS` order."""
    data: str
    encoding = "base64"
    if data_encoding == "auto":
        try:
            data = record.data.decode("utf-8")
            encoding = "utf-8"
        except UnicodeDecodeError:
            data = base64.b64encode(record.data).decode("ascii")
    else:
        data = base64.b64encode(record.data).decode("ascii")
    arrival = record.approximate_arrival
    return [
        data,
        encoding,
        record.partition_key,
        record.shard_id,
        record.sequence_number,
        record.sub_sequence_number,
        record.attempt,
        int(arrival.timestamp() * 1000) if arrival is not None else None,
    ]


def decode_data(value: str, encoding: str) -> bytes:
    """Inverse of the ``data``/``encoding`` pair of :func:`encode_tuple` (for bolts, tests)."""
    if encoding == "utf-8":
        return value.encode("utf-8")
    if encoding == "base64":
        return base64.b64decode(value, validate=True)
    raise ValueError(f"unknown data encoding {encoding!r}: expected utf-8 or base64")
