"""The user's processing, in three styles, and what runs them on the executors.

* a **per-record function** (:func:`per_record`, or any plain callable): returning
  means ok, raising an ``Exception`` fails the record (retried, then dead-lettered);
* a **DataFrame transform** (:func:`dataframe_transform`): takes the micro-batch,
  returns ``_row`` with a ``status`` (and optionally an ``error``) column;
* a **fan-out** (:func:`fan_out`): ``emit(record)`` makes derived records that sinks
  write; a source is acked once every sink wrote every one of them (Storm's acker).

``--process module:attr`` names one: a processor, a plain function, or a factory marked
with :func:`processor_factory`. The contracts in full: docs/spark-job.md.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa

from kinesis_spout.errors import ConfigError
from kinesis_spout.records import Record
from kinesis_spout.spark.process.arrow import (
    ARRIVAL,
    DATA_COLUMNS,
    arrival_times,
    format_error,
)
from kinesis_spout.spark.process.fastretry import FastRetry
from tracker import SequenceKey

if TYPE_CHECKING:
    from kinesis_spout.config import SpoutConfig

log = logging.getLogger(__name__)

DataFrame: TypeAlias = Any
"""A ``pyspark.sql.DataFrame`` (pyspark's typing is loose; kept as Any)."""


InputRecord: TypeAlias = Record
"""What a per-record function (and a fan-out's ``emit``) gets: the
:class:`~kinesis_spout.records.Record` itself, in both read modes, so a function is
unit-tested by passing a ``Record`` (or one from :func:`input_record`). Its ``attempt``
is 1 for the first delivery, 2 for the first retry, ...; its ``message_id`` is the id
the spout acks."""


RecordFunction: TypeAlias = Callable[[Record], object]
Transform: TypeAlias = Callable[[DataFrame], DataFrame]
EmitFunction: TypeAlias = Callable[[Record], "Iterable[Any] | None"]
FanOutSink: TypeAlias = Callable[[DataFrame], "DataFrame | None"]


@dataclass(frozen=True)
class RecordProcessor:
    """A per-record function run on the executors (an exception = fail)."""

    fn: RecordFunction
    name: str = ""


@dataclass(frozen=True)
class TransformProcessor:
    """A DataFrame transform returning ``_row`` + ``status`` (+ ``error``)."""

    transform: Transform
    name: str = ""


@dataclass(frozen=True)
class FanOutProcessor:
    """Records split into derived records, each anchored and acked per sink."""

    emit: EmitFunction
    schema: Any
    """The derived records' columns: a DDL string (``"word string"``), a
    pyspark ``StructType`` or a ``pyarrow.Schema``."""
    sinks: tuple[FanOutSink, ...] = field(default_factory=tuple)
    name: str = ""


Processor: TypeAlias = RecordProcessor | TransformProcessor | FanOutProcessor


def _name_of(obj: object) -> str:
    return str(getattr(obj, "__qualname__", None) or type(obj).__name__)


def per_record(fn: RecordFunction, name: str | None = None) -> RecordProcessor:
    """The per-record style: ``fn(record)`` returns (ok) or raises (failed)."""
    if not callable(fn):
        raise ConfigError("process", fn, "a callable taking one record")
    return RecordProcessor(fn, name or _name_of(fn))


def dataframe_transform(transform: Transform, name: str | None = None) -> TransformProcessor:
    """The DataFrame style: ``transform(df)`` returns ``_row`` + ``status`` (+ ``error``)."""
    if not callable(transform):
        raise ConfigError("process", transform, "a callable taking a DataFrame")
    return TransformProcessor(transform, name or _name_of(transform))


def fan_out(
    emit: EmitFunction, schema: Any, sinks: Iterable[FanOutSink], name: str | None = None
) -> FanOutProcessor:
    """The fan-out style: ``emit(record)`` yields derived records of ``schema``;
    every sink gets them all (plus ``_root``/``_id``) and returns their statuses."""
    sink_tuple = tuple(sinks)
    if not callable(emit):
        raise ConfigError("process", emit, "an emit function taking one record")
    if not sink_tuple:
        raise ConfigError("sinks", sink_tuple, "at least one sink for the derived records")
    for s in sink_tuple:
        if not callable(s):
            raise ConfigError("sinks", s, "callables taking the derived DataFrame")
    return FanOutProcessor(emit, schema, sink_tuple, name or _name_of(emit))


_FACTORY_MARK = "__kinesis_spout_processor_factory__"


def processor_factory(fn: Callable[[SpoutConfig], Processor]) -> Callable[[SpoutConfig], Processor]:
    """Mark ``fn(config) -> Processor`` so that ``--process`` calls it with the config."""
    setattr(fn, _FACTORY_MARK, True)
    return fn


def as_processor(obj: object, config: SpoutConfig | None = None) -> Processor:
    """A processor from what ``--process`` named (see the module doc)."""
    if isinstance(obj, RecordProcessor | TransformProcessor | FanOutProcessor):
        return obj
    if callable(obj) and getattr(obj, _FACTORY_MARK, False):
        if config is None:
            raise ConfigError("process", obj, "a processor (a factory needs the config)")
        made = obj(config)
        if not isinstance(made, RecordProcessor | TransformProcessor | FanOutProcessor):
            raise ConfigError(
                "process", obj, f"a factory returning a processor, it returned {made!r}"
            )
        return made
    if callable(obj):
        return per_record(obj)
    raise ConfigError(
        "process", obj, "a function, a processor (per_record/dataframe_transform/fan_out)"
    )


def load_processor(spec: str, config: SpoutConfig | None = None) -> Processor:
    """Resolve ``module:attr`` or ``path/to/file.py:attr`` into a processor.

    A file path is imported under its stem (the job also ships it to the
    executors with ``addPyFile`` so that pickled references resolve there).
    """
    mod_name, sep, attr = spec.rpartition(":")
    if not sep or not mod_name or not attr:
        raise ConfigError("process", spec, "module:function or path/to/file.py:function")
    try:
        if mod_name.endswith(".py"):
            path = Path(mod_name)
            if not path.is_file():
                raise ConfigError("process", spec, f"an existing Python file ({path} not found)")
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            if module_spec is None or module_spec.loader is None:
                raise ConfigError("process", spec, "an importable Python file")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[path.stem] = module
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ConfigError("process", spec, f"an importable module ({exc})") from None
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise ConfigError("process", spec, f"a name defined in {mod_name}") from None
    return as_processor(obj, config)


# --- executor side -------------------------------------------------------------


def input_record(
    stream_name: str,
    shard_id: str,
    sequence_number: str,
    sub_sequence_number: int,
    partition_key: str,
    data: bytes,
    approximate_arrival: datetime | None,
    attempt: int = 1,
) -> Record:
    """A :class:`~kinesis_spout.records.Record` from the values of an input row, in the
    order of :data:`~kinesis_spout.spark.process.arrow.DATA_COLUMNS` (the arguments
    ``InputRecord(...)`` took when it was a class of its own); its key from the sequence
    numbers."""
    key = SequenceKey(int(sequence_number), sub_sequence_number)
    return Record(
        stream_name,
        shard_id,
        sequence_number,
        sub_sequence_number,
        partition_key,
        data,
        approximate_arrival,
        key,
        attempt,
    )


def batch_records(batch: pa.RecordBatch) -> Iterator[Record]:
    """The records of an input batch, in row order (columns by name)."""
    cols = [
        arrival_times(batch.column(name)) if name == ARRIVAL else batch.column(name).to_pylist()
        for name in DATA_COLUMNS
    ]
    for values in zip(*cols, strict=True):
        yield input_record(*values)


RecordReport: TypeAlias = Callable[[Record, "str | None", int], object]
"""Where :func:`run_records` reports each record: ``(the record, None or its last
error, its last delivery number)``."""


def run_records(
    fn: RecordFunction, records: Iterable[Record], fast: FastRetry, report: RecordReport
) -> None:
    """The per-record runner: ``fn`` on each record in turn, with fast retries
    (:meth:`FastRetry.call <.fastretry.FastRetry.call>`), each outcome handed to
    ``report`` (the read task's result).

    ``Exception`` fails the record; ``BaseException`` (SystemExit, KeyboardInterrupt)
    is left to fail the task. A hot loop in executor reads: keep it bare.
    """
    call = fast.call
    for r in records:
        error, attempt = call(fn, r, format_error)
        report(r, error, attempt)
