"""The reference model of a fan-out's trees: Storm's XOR acker fed every edge.

What the executors' settling (:mod:`kinesis_spout.spark.process.settle`) must decide is
what :class:`tracker.Acker` decides when it is fed each micro-batch's emit rows and each
sink's statuses one edge at a time (:class:`FanOutLedger`), the trees not complete then
timed out. The property tests compare the two.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from kinesis_spout.spark.process.arrow import ROOT, Statuses, sink_error
from kinesis_spout.spark.process.fanout import (
    ID,
    MASK64,
    IntArray,
    edge_ids,
    signed64,
    to_unsigned,
    xor_by_key,
)
from tracker import Acker, AckerEvent, AckerEventKind


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
                errors[i] = sink_error(t)
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
            val = int(ack_vals_signed[row - emitted.start]) & MASK64
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
