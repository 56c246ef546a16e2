"""Fan-out with Storm's guarantee: a source record is done when its whole tree is.

When one Kinesis record becomes many derived records (a sentence becomes
words) that separate sinks write, the source may be acked only once every
derived record has been written by every sink; if any of them fails or the
tree is not complete within ``message_timeout``, the source fails (and is
retried, then dead-lettered, like any record).

How it is tracked, as in Storm's acker:

* The driver gives each source record of a micro-batch a fresh random 64-bit
  **root** id (``_root`` column), via :meth:`tracker.Acker.new_id`.
* On the executor, ``emit(record)`` returns the derived records. Derived
  record ``k`` of root ``r`` gets the id ``mix(r ^ mix(k + 1))``, and its
  **edge** to sink ``s`` the id ``edge(id, s)``: one id per (derived record,
  sink), like one tuple id per target task in Storm. The executor reports,
  per source record, the XOR of all its edges (the *ack-val*).
  Ids are derived from the root, not drawn at random on the executor, so a
  Spark task that is recomputed (a lost cache block, a retried task) yields
  exactly the same ids; if the user's ``emit`` is not deterministic, the XOR
  simply never returns to 0 and the tree times out (safe, never a false ack).
* The driver ``init``\\ s the root with that ack-val; each sink returns a
  status per derived record (``_root``, ``_id``, ``status``, ``error``); the
  driver XORs ``edge(id, s)`` of every ok row into its root (``update``) and
  fails the root of every failed row. A root whose ack-val returns to 0 is
  complete: its source record is acked. ``expire(now)`` times out the rest.

A source record with no derived records completes at once; one whose
``emit`` raised fails at once with that error, without touching the acker.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from kinesis_spout.spark.arrow import ROOT, ROW, Statuses, clip_error, format_error
from kinesis_spout.spark.processing import EmitFunction, iter_records
from tracker import Acker, AckerEvent, AckerEventKind

log = logging.getLogger(__name__)

U64 = np.uint64
ID = "_id"
"""Derived record id column (int64 bits of an unsigned 64-bit id)."""

# Internal columns of the emit stage's output, before the derived fields.
STAGE_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    (ROW, pa.int64()),
    (ROOT, pa.int64()),
    (ID, pa.int64()),
    ("_ok", pa.bool_()),
    ("_error", pa.string()),
    ("_ack_val", pa.int64()),
)

_GOLDEN = U64(0x9E3779B97F4A7C15)
_M1 = U64(0xBF58476D1CE4E5B9)
_M2 = U64(0x94D049BB133111EB)
_SINK_SALT = U64(0x5EED5EED5EED5EED)
_MASK64 = (1 << 64) - 1

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


def ack_vals(roots: UIntArray, counts: IntArray, n_sinks: int) -> UIntArray:
    """Per root: the XOR of every edge of its derived records to every sink."""
    ids = derived_ids(roots, counts)
    acc = np.zeros(len(ids), dtype=np.uint64)
    for s in range(n_sinks):
        acc ^= edge_ids(ids, s)
    return xor_by_group(acc, counts)


def to_signed(values: UIntArray) -> IntArray:
    return np.asarray(values, dtype=np.uint64).view(np.int64)


def to_unsigned(values: IntArray) -> UIntArray:
    return np.asarray(values, dtype=np.int64).view(np.uint64)


def signed64(value: int) -> int:
    """An unsigned 64-bit id as the signed int64 Spark stores."""
    return value - (1 << 64) if value >= (1 << 63) else value


# --- executor side ----------------------------------------------------------------


def stage_schema(derived: pa.Schema) -> pa.Schema:
    """Output schema of the emit stage: internal columns, then the derived fields."""
    fields = [pa.field(n, t) for n, t in STAGE_FIELDS]
    fields += [pa.field(f.name, f.type, nullable=True) for f in derived]
    return pa.schema(fields)


def _normalise(item: Any, names: Sequence[str]) -> tuple[Any, ...]:
    """One derived record as a tuple in field order (tuple, dict or single value)."""
    if isinstance(item, Mapping):
        unknown = set(item) - set(names)
        if unknown:
            raise ValueError(f"derived record has unknown fields {sorted(unknown)}; schema {names}")
        return tuple(item.get(n) for n in names)
    if isinstance(item, tuple | list):
        if len(item) != len(names):
            raise ValueError(
                f"derived record {item!r} has {len(item)} values for {len(names)} fields {names}"
            )
        return tuple(item)
    if len(names) == 1:
        return (item,)
    raise ValueError(f"derived record {item!r} is not a tuple or dict for fields {names}")


def _columns(rows: Sequence[tuple[Any, ...]], derived: pa.Schema) -> list[pa.Array]:
    cols = list(zip(*rows, strict=True)) if rows else [()] * len(derived)
    return [pa.array(list(c), f.type) for c, f in zip(cols, derived, strict=True)]


def run_emit(
    emit: EmitFunction,
    derived: pa.Schema,
    n_sinks: int,
    batches: Iterable[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body of the fan-out style.

    Per input batch yields one batch of status rows (one per source record:
    ``_ok``, ``_error``, ``_ack_val``; ``_id`` null) and one of derived rows
    (``_id`` set). A record whose ``emit`` raised, or whose derived records
    do not fit the schema, fails with that error and contributes no rows.
    """
    schema = stage_schema(derived)
    names = list(derived.names)
    for batch in batches:
        roots = batch.column(ROOT).to_numpy(zero_copy_only=False).astype(np.int64)
        rows: list[int] = []
        oks: list[bool] = []
        errors: list[str | None] = []
        per_record: list[list[tuple[Any, ...]]] = []
        for row, record in iter_records(batch):
            rows.append(row)
            try:
                items = emit(record)
                norm = [_normalise(x, names) for x in (items or ())]
            except Exception as exc:  # any user error fails the source record
                oks.append(False)
                errors.append(format_error(exc))
                per_record.append([])
            else:
                oks.append(True)
                errors.append(None)
                per_record.append(norm)
        flat = [t for items in per_record for t in items]
        try:
            derived_cols = _columns(flat, derived)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            # Find the records whose values do not convert; fail only those.
            for i, items in enumerate(per_record):
                if items:
                    try:
                        _columns(items, derived)
                    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                        oks[i] = False
                        errors[i] = clip_error(f"derived record does not fit the schema: {exc}")
                        per_record[i] = []
            flat = [t for items in per_record for t in items]
            derived_cols = _columns(flat, derived)
        counts = np.array([len(x) for x in per_record], dtype=np.int64)
        roots_u = to_unsigned(roots)
        vals = np.where(np.array(oks, dtype=bool), ack_vals(roots_u, counts, n_sinks), U64(0))
        n = len(rows)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(rows, pa.int64()),
                pa.array(roots, pa.int64()),
                pa.nulls(n, pa.int64()),
                pa.array(oks, pa.bool_()),
                pa.array(errors, pa.string()),
                pa.array(to_signed(vals), pa.int64()),
                *[pa.nulls(n, f.type) for f in derived],
            ],
            schema=schema,
        )
        m = len(flat)
        if m:
            ids = derived_ids(roots_u, counts)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(np.repeat(np.array(rows, dtype=np.int64), counts)),
                    pa.array(np.repeat(roots, counts)),
                    pa.array(to_signed(ids)),
                    pa.nulls(m, pa.bool_()),
                    pa.nulls(m, pa.string()),
                    pa.nulls(m, pa.int64()),
                    *derived_cols,
                ],
                schema=schema,
            )


def emit_mapper(
    emit: EmitFunction, derived: pa.Schema, n_sinks: int
) -> partial[Iterator[pa.RecordBatch]]:
    """A picklable ``mapInArrow`` function for ``emit``."""
    return partial(run_emit, emit, derived, n_sinks)


# --- driver side ------------------------------------------------------------------


@dataclass(slots=True)
class SinkStatuses:
    """What one sink reported for the derived records it got."""

    sink: int
    name: str
    roots: IntArray
    ids: IntArray
    ok: np.ndarray[Any, np.dtype[np.bool_]]
    errors: dict[int, str] = field(default_factory=dict)
    """Error text by position in the arrays, for failed rows."""

    @classmethod
    def from_arrow(cls, sink: int, name: str, table: pa.Table) -> SinkStatuses:
        """From a table with ``_root``, ``_id``, ``ok`` and optional ``error``."""
        roots = table.column(ROOT).to_numpy(zero_copy_only=False).astype(np.int64)
        ids = table.column(ID).to_numpy(zero_copy_only=False).astype(np.int64)
        ok = table.column("ok").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
        errors: dict[int, str] = {}
        bad = np.flatnonzero(~ok)
        if len(bad):
            texts = (
                table.column("error").take(pa.array(bad)).to_pylist()
                if "error" in table.column_names
                else [None] * len(bad)
            )
            for i, t in zip(bad.tolist(), texts, strict=True):
                errors[i] = clip_error(str(t)) if t is not None else "sink reported a failure"
        return cls(sink, name, roots, ids, ok, errors)

    @classmethod
    def all_ok(cls, sink: int, name: str, roots: IntArray, ids: IntArray) -> SinkStatuses:
        return cls(sink, name, roots, ids, np.ones(len(ids), dtype=bool))


@dataclass(slots=True)
class TreeResults:
    """Source records whose trees finished, by message id."""

    acked: list[Any] = field(default_factory=list)
    """Owners (records or message ids) to ack."""
    failed: list[tuple[Any, str]] = field(default_factory=list)
    """``(owner, error)`` to fail."""


class FanOutLedger:
    """The driver's acker for fan-out trees: roots in, ack/fail decisions out.

    Pure: time is an argument. Owners are the source records (or their
    message ids): whatever the spout's ``ack_many``/``fail_many`` take.
    """

    def __init__(self, n_sinks: int, timeout: float | None, rng: random.Random | None = None):
        self.n_sinks = n_sinks
        self.acker = Acker(timeout=timeout, rng=rng)

    @property
    def pending(self) -> int:
        """Trees started and not finished."""
        return len(self.acker)

    def new_roots(self, n: int) -> list[int]:
        """``n`` fresh random root ids, as signed int64 values."""
        return [signed64(self.acker.new_id()) for _ in range(n)]

    def apply(
        self,
        owners: Sequence[Any],
        roots: Sequence[int],
        emitted: Statuses,
        ack_vals_signed: IntArray,
        sinks: Sequence[SinkStatuses],
        now: float,
    ) -> TreeResults:
        """Fold one micro-batch (or part of one) into the ledger.

        ``owners`` and ``roots`` are indexed by batch row; ``ack_vals_signed``
        (the executor's ack-vals) by row minus ``emitted.start``.
        """
        out = TreeResults()
        acker = self.acker
        for row in range(emitted.start, emitted.stop):
            if not emitted.ok[row - emitted.start]:
                out.failed.append((owners[row], emitted.errors.get(row, "emit failed")))
                continue
            val = int(ack_vals_signed[row - emitted.start]) & _MASK64
            self._on(acker.init(roots[row], val, owners[row], now), out)
        for st in sinks:
            for i, err in st.errors.items():
                ev = acker.fail(int(st.roots[i]), now)
                self._on(ev, out, f"sink {st.name}: {err}")
            good = np.flatnonzero(st.ok)
            if not len(good):
                continue
            keys, xors = xor_by_key(st.roots[good], edge_ids(to_unsigned(st.ids[good]), st.sink))
            for root, x in zip(keys.tolist(), xors.tolist(), strict=True):
                self._on(acker.update(root, x, now), out)
        return out

    def expire(self, now: float) -> TreeResults:
        """Time out trees older than the timeout: their sources fail."""
        out = TreeResults()
        for ev in self.acker.expire(now):
            self._on(ev, out)
        return out

    @staticmethod
    def _on(ev: AckerEvent | None, out: TreeResults, error: str | None = None) -> None:
        if ev is None:
            return
        owner = ev.owner
        if ev.kind is AckerEventKind.COMPLETE:
            out.acked.append(owner)
        elif ev.kind is AckerEventKind.FAILED:
            out.failed.append((owner, error or "a derived record failed"))
        else:
            out.failed.append(
                (owner, "fan-out tree not complete within message_timeout (derived record lost)")
            )
