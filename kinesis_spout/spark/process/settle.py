"""Settling a micro-batch's fan-out trees where they were emitted: Storm's XOR acker,
folded per root on the executors and finished in numpy on the driver.

Every tree of a micro-batch ends within it, so the edges need not travel to the driver
one by one: each task XORs the edges it saw per root (:func:`edge_partials`), and
:func:`settle` folds those rows as :class:`tracker.Acker` would decide (tested against
it, property-based). The rules a tree is settled by: ``docs/spark-job.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kinesis_spout.spark.process.arrow import ROOT, ROW, Statuses, sink_error
from kinesis_spout.spark.process.exprs import Exprs
from kinesis_spout.spark.process.fanout import (
    ID,
    SINK_VALS,
    edge_ids,
    to_signed,
    to_unsigned,
    xor_by_key,
)

SINK = "_sink"
"""The sink number of a partial (negative: the emit stage's row, :data:`EMIT`)."""
EMIT = -1
"""``_sink`` of the emit row of a record."""
EMIT_DONE = -2
"""``_sink`` of the emit row of a record emitted ok with no edges (its ack-val 0): the
acker's ``init`` completes its tree at once, and no sink row can change that."""
XOR = "_xor"
FAILED = "_failed"
ERROR = "_error"
PARTIAL_SCHEMA = pa.schema(
    [
        pa.field(ROW, pa.int64()),
        pa.field(ROOT, pa.int64()),
        pa.field(SINK, pa.int64()),
        pa.field(XOR, pa.int64()),
        pa.field(FAILED, pa.bool_()),
        pa.field(ERROR, pa.string()),
    ]
)
"""A partial: the emit row of a record (``_row`` set, ``_xor`` its ack-val) or, per
sink and root, the XOR of the edges a task saw acked and whether one failed."""
PARTIAL_DDL = "_row long, _root long, _sink long, _xor long, _failed boolean, _error string"
INCOMPLETE = "fan-out tree not complete within message_timeout (derived record lost)"
EMIT_LOST = "emit lost the record"


def _partials(sink: int, name: str, batch: pa.RecordBatch) -> pa.RecordBatch:
    """One task batch of a sink's statuses (``_root``, ``_id``, ``ok``, ``error``:
    :func:`~kinesis_spout.spark.process.fanout_sinks.sink_frame`) as partials: the XOR
    of the ok edges per root, one row per failed root."""
    keyed = pc.and_(pc.is_valid(batch.column(ROOT)), pc.is_valid(batch.column(ID)))
    if not pc.all(keyed).as_py():  # a row without its keys acks nothing, fails nothing
        batch = batch.filter(keyed)
    roots = batch.column(ROOT).to_numpy(zero_copy_only=False).astype(np.int64)
    ids = batch.column(ID).to_numpy(zero_copy_only=False).astype(np.int64)
    ok = batch.column("ok").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    keys, xors = xor_by_key(roots[ok], edge_ids(to_unsigned(ids[ok]), sink))
    bad = np.flatnonzero(~ok)
    bad_roots, first = np.unique(roots[bad], return_index=True)
    picked = batch.column("error").take(pa.array(bad[first], pa.int64())).to_pylist()
    texts = [f"sink {name}: {sink_error(t)}" for t in picked]
    n = len(keys) + len(bad_roots)
    return pa.RecordBatch.from_arrays(
        [
            pa.nulls(n, pa.int64()),
            pa.array(np.concatenate([keys, bad_roots]), pa.int64()),
            pa.array(np.full(n, sink, dtype=np.int64)),
            pa.array(np.concatenate([to_signed(xors), np.zeros(len(bad_roots), np.int64)])),
            pa.array(np.arange(n) >= len(keys)),
            pa.array([*[None] * len(keys), *texts], pa.string()),
        ],
        schema=PARTIAL_SCHEMA,
    )


def edge_partials(
    sink: int, name: str
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` body that turns sink ``sink``'s statuses into partials."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows:
                yield _partials(sink, name, batch)

    return run


def partials_frame(stage: Any, sinks: list[tuple[str, Any]], exprs: Exprs) -> Any:
    """One DataFrame of every partial: the emit stage's rows (``stage``, a row per source
    record) and each sink's statuses (``(name, DataFrame of _root, _id, ok,
    error)``, in sink order) folded per task by :func:`edge_partials`.

    A sink given as ``(name, None)`` wrote every derived record: it acks each edge to
    it, whose XOR per root the emit stage already has (``_sink_vals``), so it is XORed
    into the emit row instead of the derived records being read again. ``exprs``: where
    the emit rows' expressions are kept between micro-batches."""
    wrote_all = tuple(statuses is None for _, statuses in sinks)
    columns = exprs.get(("emit partials", wrote_all), lambda: _emit_partials(wrote_all))
    frame = stage.select(*columns)
    for i, (name, statuses) in enumerate(sinks):
        if statuses is not None:
            frame = frame.unionByName(statuses.mapInArrow(edge_partials(i, name), PARTIAL_DDL))
    return frame


def _emit_partials(wrote_all: tuple[bool, ...]) -> tuple[Any, ...]:
    """The emit rows' partial's columns, the sinks ``wrote_all`` XORed in."""
    from pyspark.sql import functions as F

    xor = F.col("_ack_val")
    for i, wrote in enumerate(wrote_all):
        if wrote:
            xor = xor.bitwiseXOR(F.coalesce(F.element_at(SINK_VALS, i + 1), F.lit(0)))
    ok = F.coalesce(F.col("_ok"), F.lit(False))
    sink = F.when(ok & (F.col("_ack_val") == 0), F.lit(EMIT_DONE)).otherwise(F.lit(EMIT))
    columns = (
        F.col(ROW),
        F.col(ROOT),
        sink.cast("long").alias(SINK),
        xor.alias(XOR),
        (~ok).alias(FAILED),
        F.col("_error").alias(ERROR),
    )
    return columns


def written_partials(stage: pa.RecordBatch) -> pa.RecordBatch:
    """The emit rows' partials of a batch of the emit stage as :func:`_emit_partials`
    makes them when every sink wrote everything, in numpy: what a read task reports
    (:mod:`~kinesis_spout.spark.read.emit_reports`)."""
    ok = stage.column("_ok").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    acks = stage.column("_ack_val")
    ack = acks.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    known = acks.is_valid().to_numpy(zero_copy_only=False).astype(bool)
    xor = ack.copy()
    vals = stage.column(SINK_VALS)
    if len(vals.flatten()):  # each row's list holds a value per sink (nulls: 0)
        parents = pc.list_parent_indices(vals).to_numpy(zero_copy_only=False)
        flat = vals.flatten().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        np.bitwise_xor.at(xor, parents, flat)
    sink = np.where(ok & known & (ack == 0), EMIT_DONE, EMIT).astype(np.int64)
    return pa.RecordBatch.from_arrays(
        [
            stage.column(ROW).cast(pa.int64()),
            stage.column(ROOT).cast(pa.int64()),
            pa.array(sink, pa.int64()),
            pa.array(xor, pa.int64()),
            pa.array(~ok, pa.bool_()),
            stage.column("_error").cast(pa.string()),
        ],
        schema=PARTIAL_SCHEMA,
    )


def settle(partials: pa.Table, start: int, stop: int) -> Statuses:
    """The status of rows ``start..stop-1`` from their partials (see the module)."""
    n = stop - start
    sinks = partials.column(SINK).to_numpy(zero_copy_only=False)
    emit = _EmitRows(partials.filter(pa.array(sinks < 0)), start, n)
    edges = partials.filter(pa.array(sinks >= 0))
    at = _rows_of(
        edges.column(ROOT).to_numpy(zero_copy_only=False).astype(np.int64), emit.roots, emit.rows
    )
    known = at >= 0
    known[known] = ~emit.done_at_init[at[known]]  # the acker ignores a finished tree's rows
    xors = to_unsigned(edges.column(XOR).to_numpy(zero_copy_only=False).astype(np.int64))
    total = emit.total
    np.bitwise_xor.at(total, at[known], xors[known])
    sink_failed = np.zeros(n, dtype=bool)
    failed_at = edges.column(FAILED).to_numpy(zero_copy_only=False).astype(bool) & known
    sink_failed[at[failed_at]] = True

    ok = emit.seen & ~emit.twice & ~emit.failed & ~sink_failed & (total == 0)
    errors = emit.errors()
    _first_sink_errors(edges, at, failed_at, errors, start)
    for i in np.flatnonzero(~ok).tolist():
        errors.setdefault(start + i, INCOMPLETE)
    return Statuses(start, stop, ok, errors)


class _EmitRows:
    """The emit rows of a (sub-)batch, by row: seen, failed, twice, the XOR to start from,
    complete at once (no edges), and their errors."""

    def __init__(self, emit: pa.Table, start: int, n: int) -> None:
        self.start = start
        self.emit = emit
        rows = emit.column(ROW).to_numpy(zero_copy_only=False).astype(np.int64) - start
        if len(rows) and (rows.min() < 0 or rows.max() >= n):
            bad = int(rows[(rows < 0) | (rows >= n)][0]) + start
            raise ValueError(
                f"status for row {bad} outside the batch rows {start}..{start + n - 1}"
            )
        self.rows = rows
        self.roots = emit.column(ROOT).to_numpy(zero_copy_only=False).astype(np.int64)
        self.count = np.bincount(rows, minlength=n)
        self.seen = self.count > 0
        self.twice = self.count > 1
        self.failed_each = emit.column(FAILED).to_numpy(zero_copy_only=False).astype(bool)
        self.failed = np.zeros(n, dtype=bool)
        np.logical_or.at(self.failed, rows, self.failed_each)
        done = emit.column(SINK).to_numpy(zero_copy_only=False) == EMIT_DONE
        self.done_at_init = np.zeros(n, dtype=bool)
        self.done_at_init[rows[done & ~self.failed_each]] = True
        self.total = np.zeros(n, dtype=np.uint64)
        vals = to_unsigned(emit.column(XOR).fill_null(0).to_numpy(zero_copy_only=False))
        np.bitwise_xor.at(self.total, rows, vals)

    def errors(self) -> dict[int, str]:
        """Lost, failed (the emit's error) and repeated rows, by row."""
        start = self.start
        errors = {start + i: EMIT_LOST for i in np.flatnonzero(~self.seen).tolist()}
        texts = self.emit.column(ERROR)
        for j in np.flatnonzero(self.failed_each).tolist():
            text = texts[j].as_py()
            errors.setdefault(
                start + int(self.rows[j]), text if text is not None else "emit failed"
            )
        for i in np.flatnonzero(self.twice).tolist():
            errors.setdefault(
                start + i, f"the emit stage returned the record {self.count[i]} times"
            )
        return errors


def _rows_of(
    keys: np.ndarray[Any, Any], roots: np.ndarray[Any, Any], rows: np.ndarray[Any, Any]
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """The row of each root in ``keys`` (-1: not a root of these rows)."""
    if not len(roots) or not len(keys):
        return np.full(len(keys), -1, dtype=np.int64)
    order = np.argsort(roots, kind="stable")
    sorted_roots = roots[order]
    pos = np.minimum(np.searchsorted(sorted_roots, keys), len(roots) - 1)
    return np.where(sorted_roots[pos] == keys, rows[order[pos]], -1).astype(np.int64)


def _first_sink_errors(
    edges: pa.Table,
    at: np.ndarray[Any, np.dtype[np.int64]],
    failed_at: np.ndarray[Any, np.dtype[np.bool_]],
    errors: dict[int, str],
    start: int,
) -> None:
    """The error of the lowest-numbered sink that failed each row (emit errors stay)."""
    picked = np.flatnonzero(failed_at)
    if not len(picked):
        return
    sinks = edges.column(SINK).to_numpy(zero_copy_only=False)[picked]
    texts = edges.column(ERROR).take(pa.array(picked)).to_pylist()
    for k in np.argsort(sinks, kind="stable").tolist():
        errors.setdefault(start + int(at[picked[k]]), texts[k] or "sink reported a failure")
