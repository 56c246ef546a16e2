"""Fan-out with Storm's guarantee: a source record is done when its whole tree is.

A source record of a micro-batch gets a random 64-bit root id; ``emit`` on the executor
makes its derived records, whose ids are derived from the root (so a recomputed task
yields the same ids: a non-deterministic ``emit`` times out, never acks falsely), and
each (derived record, sink) edge has an id. The executor reports, per source, the XOR of
its edges; the driver XORs back every edge a sink wrote: a root at 0 is complete and its
source acked, a failed edge fails it. This module holds the id arithmetic, the emit
stage's columns and the executors' emit; how the trees settle: :mod:`.settle`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kinesis_spout.records import Record
from kinesis_spout.spark.process.arrow import ROOT, ROW, clip_error, format_error
from kinesis_spout.spark.process.exprs import Exprs
from kinesis_spout.spark.process.styles import EmitFunction, batch_records

log = logging.getLogger(__name__)

U64 = np.uint64
ID = "_id"
"""Derived record id column (int64 bits of an unsigned 64-bit id)."""
SINK_VALS = "_sink_vals"
"""Per source record and sink: the XOR of its edges to that sink (the ack-val is
their XOR); what a sink that wrote everything acks back, without its ids."""

IDS = "_ids"
"""Per source record, the ids of its derived records, in order (a list column)."""
DERIVED_PREFIX = "_d_"
"""The emit stage's column of derived field ``f`` (a list, one value per derived record)
is ``_d_f``: the stage's own names, and the read stage's record columns beside them
(``data``, ``stream``, ...), cannot clash with a derived field's."""

# Internal columns of the emit stage's output, before the derived fields.
STAGE_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    (ROW, pa.int64()),
    (ROOT, pa.int64()),
    ("_ok", pa.bool_()),
    ("_error", pa.string()),
    ("_ack_val", pa.int64()),
    (SINK_VALS, pa.list_(pa.int64())),
    (IDS, pa.list_(pa.int64())),
)

_GOLDEN = U64(0x9E3779B97F4A7C15)
_M1 = U64(0xBF58476D1CE4E5B9)
_M2 = U64(0x94D049BB133111EB)
_SINK_SALT = U64(0x5EED5EED5EED5EED)
MASK64 = (1 << 64) - 1

UIntArray = np.ndarray[Any, np.dtype[np.uint64]]
IntArray = np.ndarray[Any, np.dtype[np.int64]]


# --- id arithmetic (pure numpy, identical on executors and the driver) ---------


def mix64(x: UIntArray) -> UIntArray:
    """SplitMix64 (a bijection on 64-bit integers, good avalanche), vectorised."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> U64(30))) * _M1
        z = (z ^ (z >> U64(27))) * _M2
        return z ^ (z >> U64(31))


def _nonzero(x: UIntArray) -> UIntArray:
    return x | (x == 0).astype(np.uint64)  # type: ignore[no-any-return]


def derived_ids(roots: UIntArray, counts: IntArray) -> UIntArray:
    """The ids of ``counts[i]`` derived records of each root ``roots[i]``, concatenated."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.uint64)
    rep = np.repeat(np.asarray(roots, dtype=np.uint64), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    k = (np.arange(total, dtype=np.int64) - starts + 1).astype(np.uint64)
    return _nonzero(mix64(rep ^ mix64(k)))


def edge_ids(ids: UIntArray, sink: int) -> UIntArray:
    """The edge ids of derived records ``ids`` to sink number ``sink``."""
    salt = mix64(np.array([sink], dtype=np.uint64) ^ _SINK_SALT)[0]
    return _nonzero(mix64(np.asarray(ids, dtype=np.uint64) ^ salt))


def xor_by_group(values: UIntArray, counts: IntArray) -> UIntArray:
    """XOR of consecutive groups of ``values`` (sizes ``counts``; empty groups give 0)."""
    values = np.asarray(values, dtype=np.uint64)
    prefix = np.zeros(len(values) + 1, dtype=np.uint64)
    if len(values):
        prefix[1:] = np.bitwise_xor.accumulate(values)
    ends = np.cumsum(np.asarray(counts, dtype=np.int64))
    return prefix[ends] ^ prefix[ends - np.asarray(counts, dtype=np.int64)]


def xor_by_key(keys: IntArray, values: UIntArray) -> tuple[IntArray, UIntArray]:
    """``(unique keys, XOR of the values of each key)``."""
    keys = np.asarray(keys, dtype=np.int64)
    if len(keys) == 0:
        return keys, np.zeros(0, dtype=np.uint64)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    uniq, counts = np.unique(sk, return_counts=True)
    return uniq, xor_by_group(np.asarray(values, dtype=np.uint64)[order], counts)


def sink_vals(roots: UIntArray, counts: IntArray, n_sinks: int) -> list[UIntArray]:
    """Per sink, per root: the XOR of the edges of its derived records to that sink."""
    ids = derived_ids(roots, counts)
    return [xor_by_group(edge_ids(ids, s), counts) for s in range(n_sinks)]


def xor_each(arrays: Sequence[UIntArray], n: int) -> UIntArray:
    """Element by element, the XOR of ``arrays`` (each of length ``n``; none: zeros)."""
    acc = np.zeros(n, dtype=np.uint64)
    for values in arrays:
        acc ^= values
    return acc


def ack_vals(roots: UIntArray, counts: IntArray, n_sinks: int) -> UIntArray:
    """Per root: the XOR of every edge of its derived records to every sink."""
    return xor_each(sink_vals(roots, counts, n_sinks), len(counts))


def to_signed(values: UIntArray) -> IntArray:
    return np.asarray(values, dtype=np.uint64).view(np.int64)


def to_unsigned(values: IntArray) -> UIntArray:
    return np.asarray(values, dtype=np.int64).view(np.uint64)


def signed64(value: int) -> int:
    """An unsigned 64-bit id as the signed int64 Spark stores."""
    return value - (1 << 64) if value >= (1 << 63) else value


# --- executor side ----------------------------------------------------------------


def stage_schema(derived: pa.Schema) -> pa.Schema:
    """Output schema of the emit stage: one row per source record, its internal columns,
    then each derived field as a list (:func:`derived_column`) of its derived records'
    values, in the order of :data:`IDS`."""
    fields = [pa.field(n, t) for n, t in STAGE_FIELDS]
    fields += [pa.field(derived_column(f.name), pa.list_(f.type)) for f in derived]
    return pa.schema(fields)


def derived_column(name: str) -> str:
    """The emit stage's list column of derived field ``name``."""
    return DERIVED_PREFIX + name


_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})
"""Types a derived record of a one-field schema may be as it is (no tuple or dict to
look into)."""


def _normalise(item: Any, names: Sequence[str]) -> Any:
    """One derived record as a row: a tuple in field order (tuple, dict or single
    value); with one field, the value itself."""
    one = len(names) == 1
    if isinstance(item, Mapping):
        unknown = set(item) - set(names)
        if unknown:
            raise ValueError(f"derived record has unknown fields {sorted(unknown)}; schema {names}")
        return item.get(names[0]) if one else tuple(item.get(n) for n in names)
    if isinstance(item, tuple | list):
        if len(item) != len(names):
            raise ValueError(
                f"derived record {item!r} has {len(item)} values for {len(names)} fields {names}"
            )
        return item[0] if one else tuple(item)
    if one:
        return item
    raise ValueError(f"derived record {item!r} is not a tuple or dict for fields {names}")


def _rows(items: Iterable[Any] | None, names: Sequence[str]) -> list[Any]:
    """``emit``'s answer as rows (:func:`_normalise`). The common case of one field of
    plain values (a word per derived record) is taken as it is: no call per record."""
    values = list(items or ())
    if len(names) == 1 and set(map(type, values)) <= _PLAIN:
        return values
    return [_normalise(x, names) for x in values]


def _columns(rows: Sequence[Any], derived: pa.Schema) -> list[pa.Array]:
    """Rows (:func:`_normalise`) as Arrow columns of the derived schema."""
    if len(derived) == 1:
        return [pa.array(rows, derived.field(0).type)]
    cols = list(zip(*rows, strict=True)) if rows else [()] * len(derived)
    return [pa.array(list(c), f.type) for c, f in zip(cols, derived, strict=True)]


def run_emit(
    emit: EmitFunction,
    derived: pa.Schema,
    n_sinks: int,
    batches: Iterable[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body of the fan-out style: :func:`emit_records` on the
    records of each input batch (``_row``, ``_root`` and the record's columns)."""
    for batch in batches:
        roots = batch.column(ROOT).to_numpy(zero_copy_only=False).astype(np.int64)
        rows = batch.column(ROW).to_numpy(zero_copy_only=False).astype(np.int64)
        yield emit_records(emit, derived, n_sinks, rows, roots, batch_records(batch))


def emit_records(
    emit: EmitFunction,
    derived: pa.Schema,
    n_sinks: int,
    rows: IntArray,
    roots: IntArray,
    records: Iterable[Record],
) -> pa.RecordBatch:
    """``emit`` on each record (row ``rows[i]``, root id ``roots[i]``), as a batch of
    the emit stage (:func:`stage_schema` of ``derived``): one row per source record,
    its status (``_ok``, ``_error``, ``_ack_val``, ``_sink_vals``) and its derived
    records (``_ids`` and a list per derived field). A record whose ``emit`` raised, or
    whose derived records do not fit the schema, fails with that error and has no
    derived records.

    One row per source record, not one per derived record: on the word count the JVM
    converts and caches one row where it had seven, and explodes the lists only where a
    sink reads them (:func:`derived_frame`)."""
    oks, errors, per_record = _emit_all(emit, list(derived.names), records)
    derived_cols = _derived_columns(per_record, oks, errors, derived)
    counts = np.array([len(x) for x in per_record], dtype=np.int64)
    roots_u = to_unsigned(roots)
    emitted = np.array(oks, dtype=bool)
    per_sink = [np.where(emitted, v, U64(0)) for v in sink_vals(roots_u, counts, n_sinks)]
    vals = xor_each(per_sink, len(oks))
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]), pa.int32())
    ids = pa.array(to_signed(derived_ids(roots_u, counts)), pa.int64())
    return pa.RecordBatch.from_arrays(
        [
            pa.array(rows, pa.int64()),
            pa.array(roots, pa.int64()),
            pa.array(oks, pa.bool_()),
            pa.array(errors, pa.string()),
            pa.array(to_signed(vals), pa.int64()),
            _per_row(per_sink, len(oks)),
            pa.ListArray.from_arrays(offsets, ids),
            *[pa.ListArray.from_arrays(offsets, c) for c in derived_cols],
        ],
        schema=stage_schema(derived),
    )


def _per_row(per_sink: list[UIntArray], n: int) -> pa.Array:
    """``[vals of sink 0, sink 1, ...]`` per row, as a list column."""
    width = len(per_sink)
    flat: Any = np.stack([to_signed(v) for v in per_sink], axis=1).ravel() if width else []
    offsets = np.arange(n + 1, dtype=np.int32) * width
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.int64()))


def _emit_all(
    emit: EmitFunction, names: list[str], records: Iterable[Record]
) -> tuple[list[bool], list[str | None], list[list[Any]]]:
    """``emit`` on every record: (ok flags, errors, derived rows per record,
    :func:`_rows`)."""
    oks: list[bool] = []
    errors: list[str | None] = []
    per_record: list[list[Any]] = []
    for record in records:
        try:
            norm = _rows(emit(record), names)
        except Exception as exc:  # any user error fails the source record
            oks.append(False)
            errors.append(format_error(exc))
            per_record.append([])
        else:
            oks.append(True)
            errors.append(None)
            per_record.append(norm)
    return oks, errors, per_record


def _derived_columns(
    per_record: list[list[Any]],
    oks: list[bool],
    errors: list[str | None],
    derived: pa.Schema,
) -> list[pa.Array]:
    """The derived rows as Arrow columns; a record whose rows do not fit the schema
    fails (in ``oks``/``errors``, its rows dropped) and the others go on."""
    flat = [t for items in per_record for t in items]
    try:
        return _columns(flat, derived)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    for i, items in enumerate(per_record):
        if items:
            try:
                _columns(items, derived)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                oks[i] = False
                errors[i] = clip_error(f"derived record does not fit the schema: {exc}")
                per_record[i] = []
    return _columns([t for items in per_record for t in items], derived)


def emit_mapper(
    emit: EmitFunction, derived: pa.Schema, n_sinks: int
) -> partial[Iterator[pa.RecordBatch]]:
    """A picklable ``mapInArrow`` function for ``emit``."""
    return partial(run_emit, emit, derived, n_sinks)


# --- driver side ------------------------------------------------------------------


POSITION = "_k"
"""A derived record's place among its source record's (0-based) while the stage's lists
are exploded."""


def derived_frame(stage: Any, names: Sequence[str], exprs: Exprs) -> Any:
    """The derived records of an emit stage (:func:`stage_schema`) as the sinks get
    them: ``_root``, ``_id`` and the fields ``names``, a row per derived record, those
    of a source record in ``emit``'s order. ``exprs``: where the expressions are kept
    between micro-batches."""
    first, second = exprs.get(("derived", tuple(names)), lambda: _exploding(names))
    return stage.select(*first).select(*second)


def _exploding(names: Sequence[str]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The two selects of :func:`derived_frame`: the ids exploded with their places
    beside the lists, then each field's value at its record's place (a field no sink
    reads is pruned by Spark's optimizer before it is looked up)."""
    from pyspark.sql import functions as F

    lists = [derived_column(n) for n in names]
    first = (F.col(ROOT), *map(F.col, lists), F.posexplode(IDS).alias(POSITION, ID))
    at = F.col(POSITION) + 1
    second = (
        F.col(ROOT),
        F.col(ID),
        *(F.element_at(F.col(c), at).alias(n) for c, n in zip(lists, names, strict=True)),
    )
    return first, second


def derived_rows(stage: pa.Table | pa.RecordBatch, names: Sequence[str]) -> pa.Table:
    """:func:`derived_frame`'s rows from an emit stage in Arrow, without Spark: what the
    stage's lists mean, for the tests and anyone reading a stage's batches."""
    ids = stage.column(IDS)
    parents = pc.list_parent_indices(ids)
    columns = {ROOT: pc.take(stage.column(ROOT), parents), ID: pc.list_flatten(ids)}
    columns.update({n: pc.list_flatten(stage.column(derived_column(n))) for n in names})
    return pa.table(columns)
