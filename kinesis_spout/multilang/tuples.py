"""What the adapter reads from a spout and writes to Storm: the spout's shape
(:class:`SpoutLike`, :class:`SpoutRecord`), an emit's message id and the emitted tuple's
fields and encoding.

A spout of one stream names a record ``"<shardId>:<sequence>[:<sub>]"``, one of several
streams ``"<stream>/<shardId>:..."`` (:func:`tuple_id`): the id Storm acks or fails is
always one the spout takes back. The tuple's layout is :data:`OUTPUT_FIELDS`, with
``stream_name`` appended only when asked for (:func:`output_fields`), so a topology
declared for one stream keeps its layout when its spout reads several.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from kinesis_spout.config import SpoutConfig

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

STREAM_NAME_FIELD = "stream_name"
"""The opt-in last field: the name of the stream the record was read from."""


def output_fields(include_stream_name: bool = False) -> tuple[str, ...]:
    """The fields of an emitted tuple, in order: :data:`OUTPUT_FIELDS`, then
    ``stream_name`` with ``include_stream_name``."""
    return (*OUTPUT_FIELDS, STREAM_NAME_FIELD) if include_stream_name else OUTPUT_FIELDS


class SpoutRecord(Protocol):
    """What the adapter reads from a record (:class:`kinesis_spout.records.Record`)."""

    @property
    def stream_name(self) -> str: ...
    @property
    def message_id(self) -> str: ...
    @property
    def stream_message_id(self) -> str: ...
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

    @property
    def config(self) -> SpoutConfig:
        """The spout's config: the adapter reads which streams it reads."""
        ...

    def open(self) -> None: ...
    def next_batch(self, max_records: int) -> Sequence[SpoutRecord]: ...
    def poll_delay(self) -> float: ...
    def ack(self, message_id: str) -> object: ...
    def fail(self, message_id: str, error: str | None = None) -> object: ...
    def checkpoint(self, force: bool = False) -> object: ...
    def activate(self) -> None: ...
    def deactivate(self) -> None: ...
    def close(self) -> None: ...


def tuple_id(record: SpoutRecord, several_streams: bool) -> str:
    """The message id of ``record``'s emit: the spout's id of it, which names the stream
    when the spout reads ``several_streams``."""
    return record.stream_message_id if several_streams else record.message_id


def encode_tuple(
    record: SpoutRecord, data_encoding: str = "auto", include_stream_name: bool = False
) -> list[Any]:
    """The values of an emitted tuple, in :func:`output_fields` order."""
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
    values = [
        data,
        encoding,
        record.partition_key,
        record.shard_id,
        record.sequence_number,
        record.sub_sequence_number,
        record.attempt,
        int(arrival.timestamp() * 1000) if arrival is not None else None,
    ]
    if include_stream_name:
        values.append(record.stream_name)
    return values


def decode_data(value: str, encoding: str) -> bytes:
    """Inverse of the ``data``/``encoding`` pair of :func:`encode_tuple` (for bolts, tests)."""
    if encoding == "utf-8":
        return value.encode("utf-8")
    if encoding == "base64":
        return base64.b64decode(value, validate=True)
    raise ValueError(f"unknown data encoding {encoding!r}: expected utf-8 or base64")
