"""Fan-out trees settled from per-task partials decide as Storm's acker does: the
reference model is the driver's :class:`FanOutLedger` (:class:`tracker.Acker`) fed
every edge one by one (no Spark)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from fanout_reference import FanOutLedger, SinkStatuses
from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis_spout.spark.process.arrow import ROOT, Statuses
from kinesis_spout.spark.process.fanout import (
    ID,
    SINK_VALS,
    ack_vals,
    derived_ids,
    sink_vals,
    to_signed,
    to_unsigned,
)
from kinesis_spout.spark.process.settle import (
    EMIT_LOST,
    INCOMPLETE,
    PARTIAL_SCHEMA,
    _partials,
    settle,
    written_partials,
)

START = 5  # the rows of the (sub-)batch: START..START+n-1


@dataclass
class Batch:
    """A micro-batch after its emit stage: roots, emit outcome, derived records."""

    roots: np.ndarray[Any, np.dtype[np.int64]]
    emit_ok: list[bool]
    lost: list[bool]  # the emit stage returned no row for it
    counts: np.ndarray[Any, np.dtype[np.int64]]
    n_sinks: int

    @property
    def n(self) -> int:
        return len(self.roots)

    def vals(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        v = ack_vals(to_unsigned(self.roots), self.counts, self.n_sinks)
        return to_signed(np.where(np.array(self.emit_ok), v, np.uint64(0)))

    def derived(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """(roots, ids) of every derived record."""
        ids = derived_ids(to_unsigned(self.roots), self.counts)
        return np.repeat(self.roots, self.counts), to_signed(ids)

    def emit_table(self, wrote_all: frozenset[int] = frozenset()) -> pa.Table:
        """The emit rows as ``partials_frame`` makes them: the ack-val XOR the edges of
        each sink in ``wrote_all`` (sinks that returned None)."""
        keep = [i for i in range(self.n) if not self.lost[i]]
        raw = self.vals().tolist()
        xor = to_unsigned(self.vals())
        per_sink = sink_vals(to_unsigned(self.roots), self.counts, self.n_sinks)
        for s in wrote_all:
            xor = xor ^ np.where(np.array(self.emit_ok), per_sink[s], np.uint64(0))
        return pa.table(
            {
                "_row": pa.array([START + i for i in keep], pa.int64()),
                ROOT: pa.array(self.roots[keep], pa.int64()),
                # EMIT_DONE: emitted ok with no edges (the raw ack-val 0)
                "_sink": pa.array(
                    [-2 if self.emit_ok[i] and not raw[i] else -1 for i in keep], pa.int64()
                ),
                "_xor": pa.array(to_signed(xor)[keep], pa.int64()),
                "_failed": pa.array([not self.emit_ok[i] for i in keep]),
                "_error": pa.array(
                    [None if self.emit_ok[i] else f"emit {i}" for i in keep], pa.string()
                ),
            },
            schema=PARTIAL_SCHEMA,
        )

    def stage(self) -> pa.RecordBatch:
        """The emit stage's rows (no derived fields): what a read task settles from."""
        keep = [i for i in range(self.n) if not self.lost[i]]
        ok = np.array(self.emit_ok)
        per_sink = [
            to_signed(np.where(ok, v, np.uint64(0)))
            for v in sink_vals(to_unsigned(self.roots), self.counts, self.n_sinks)
        ]
        return pa.RecordBatch.from_pydict(
            {
                "_row": pa.array([START + i for i in keep], pa.int64()),
                ROOT: pa.array(self.roots[keep], pa.int64()),
                "_ok": pa.array([self.emit_ok[i] for i in keep], pa.bool_()),
                "_error": pa.array(
                    [None if self.emit_ok[i] else f"emit {i}" for i in keep], pa.string()
                ),
                "_ack_val": pa.array(self.vals()[keep], pa.int64()),
                SINK_VALS: pa.array(
                    [[int(v[i]) for v in per_sink] for i in keep], pa.list_(pa.int64())
                ),
            }
        )

    def emit_statuses(self) -> Statuses:
        ok = np.array([e and not lost for e, lost in zip(self.emit_ok, self.lost, strict=True)])
        errors = {
            START + i: EMIT_LOST if self.lost[i] else f"emit {i}"
            for i in range(self.n)
            if not ok[i]
        }
        return Statuses(START, START + self.n, ok, errors)


@st.composite
def batches(draw: Any) -> tuple[Batch, list[pa.Table | None]]:
    """A batch and what each sink returned: None (it wrote everything), or statuses:
    every derived record once, ok or failed, some left out or twice, and rows of roots
    not in the batch."""
    n = draw(st.integers(1, 8))
    n_sinks = draw(st.integers(1, 3))
    roots = np.array(
        draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n, unique=True)),
        dtype=np.int64,
    )
    emit_ok = draw(st.lists(st.sampled_from([True, True, True, False]), min_size=n, max_size=n))
    lost = draw(st.lists(st.integers(0, 9).map(lambda x: x == 0), min_size=n, max_size=n))
    counts = np.array(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), np.int64)
    counts = np.where(np.array(emit_ok) & ~np.array(lost), counts, 0)
    batch = Batch(roots, emit_ok, lost, counts, n_sinks)
    d_roots, d_ids = batch.derived()
    sinks: list[pa.Table | None] = []
    for _ in range(n_sinks):
        if draw(st.integers(0, 3)) == 0:
            sinks.append(None)
            continue
        fate = st.sampled_from(["ok", "ok", "ok", "failed", "missing", "twice", "both"])
        fates = draw(st.lists(fate, min_size=len(d_ids), max_size=len(d_ids)))
        rows: list[tuple[int, int, bool, str | None]] = []
        for r, i, fate in zip(d_roots.tolist(), d_ids.tolist(), fates, strict=True):
            if fate != "missing":
                failed = fate in ("failed", "both")
                rows.append((r, i, not failed, f"no {i}" if failed else None))
            if fate in ("twice", "both"):  # both: failed, then ok
                rows.append((r, i, True, None))
        if draw(st.booleans()):  # a row of another root: any, or one of the batch's
            other = st.integers(-(2**63), 2**63 - 1) | st.sampled_from(roots.tolist())
            rows.append((draw(other), 7, draw(st.booleans()), "x"))
        sinks.append(
            pa.table(
                {
                    ROOT: pa.array([r[0] for r in rows], pa.int64()),
                    ID: pa.array([r[1] for r in rows], pa.int64()),
                    "ok": pa.array([r[2] for r in rows], pa.bool_()),
                    "error": pa.array([r[3] for r in rows], pa.string()),
                }
            )
        )
    return batch, sinks


def reference(batch: Batch, sinks: list[pa.Table | None]) -> Statuses:
    """What the acker decides, every edge fed to it, the incomplete trees timed out."""
    ledger = FanOutLedger(batch.n_sinks, timeout=1.0, rng=random.Random(1))
    owners = [START + i for i in range(batch.n)]
    roots = [0] * START + batch.roots.tolist()
    d_roots, d_ids = batch.derived()
    statuses = [
        SinkStatuses.all_ok(s, f"s{s}", d_roots, d_ids)
        if t is None
        else SinkStatuses.from_arrow(s, f"s{s}", t)
        for s, t in enumerate(sinks)
    ]
    trees = ledger.apply(
        [0] * START + owners, roots, batch.emit_statuses(), batch.vals(), statuses, 0.0
    )
    trees.failed += ledger.expire(3.0).failed
    ok = np.zeros(batch.n, dtype=bool)
    ok[[r - START for r in trees.acked]] = True
    return Statuses(START, START + batch.n, ok, dict(trees.failed))


def partials(batch: Batch, sinks: list[pa.Table | None], cuts: int) -> pa.Table:
    """The emit rows and each sink's statuses folded in ``cuts`` tasks (in order; the
    sinks' last first: the order of sinks is in their partials)."""
    parts = [batch.emit_table(frozenset(s for s, t in enumerate(sinks) if t is None))]
    for s, table in reversed(list(enumerate(sinks))):
        if table is None:
            continue
        edges = np.linspace(0, table.num_rows, cuts + 1).astype(int)
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            for rb in table.slice(a, b - a).to_batches():
                parts.append(pa.Table.from_batches([_partials(s, f"s{s}", rb)]))
    return pa.concat_tables(parts)


@settings(max_examples=300, deadline=None)
@given(case=batches(), cuts=st.integers(1, 3))
def test_settled_trees_match_the_acker_fed_every_edge(
    case: tuple[Batch, list[pa.Table | None]], cuts: int
) -> None:
    batch, sinks = case
    want = reference(batch, sinks)
    got = settle(partials(batch, sinks, cuts), START, START + batch.n)
    assert got.ok.tolist() == want.ok.tolist()
    assert {r: got.errors[r] for r in got.failed_rows.tolist()} == want.errors


@settings(max_examples=200, deadline=None)
@given(case=batches())
def test_a_read_task_s_partials_are_the_emit_rows_of_sinks_that_all_wrote_everything(
    case: tuple[Batch, list[pa.Table | None]],
) -> None:
    """What a read task reports (``written_partials``, in numpy) is what the statuses'
    job makes of the emit rows when every sink returned None, and settles as the acker."""
    batch, _ = case
    every = frozenset(range(batch.n_sinks))
    got = pa.Table.from_batches([written_partials(batch.stage())])
    assert got.equals(batch.emit_table(every))
    want = reference(batch, [None] * batch.n_sinks)
    settled = settle(got, START, START + batch.n)
    assert settled.ok.tolist() == want.ok.tolist()
    assert {r: settled.errors[r] for r in settled.failed_rows.tolist()} == want.errors


def test_a_lost_derived_record_fails_its_source_as_an_incomplete_tree() -> None:
    batch = Batch(
        np.array([11, 22], np.int64), [True, True], [False, False], np.array([2, 1], np.int64), 1
    )
    roots, ids = batch.derived()
    sink = pa.table(
        {
            ROOT: roots[1:],
            ID: ids[1:],
            "ok": [True] * (len(ids) - 1),
            "error": pa.nulls(len(ids) - 1, pa.string()),
        }
    )  # the first one lost
    got = settle(partials(batch, [sink], 1), START, START + 2)
    assert got.ok.tolist() == [False, True]
    assert got.errors == {START: INCOMPLETE}


def test_a_row_outside_the_batch_is_a_clear_error() -> None:
    batch = Batch(np.array([1], np.int64), [True], [False], np.array([0], np.int64), 1)
    with pytest.raises(ValueError, match="row 5 outside the batch rows 6..6"):
        settle(batch.emit_table(), START + 1, START + 2)


def test_a_tree_without_edges_is_done_whatever_a_sink_says_of_its_root() -> None:
    """As the acker: its ``init`` with ack-val 0 completes the tree; later rows are ignored."""
    batch = Batch(
        np.array([11, 22], np.int64), [True, True], [False, False], np.array([0, 1], np.int64), 1
    )
    roots, ids = batch.derived()
    sink = pa.table(
        {
            ROOT: pa.array([11, 11, *roots.tolist()], pa.int64()),
            ID: pa.array([7, 8, *ids.tolist()], pa.int64()),
            "ok": [False, True, True],
            "error": ["x", None, None],
        }
    )
    got = settle(partials(batch, [sink], 1), START, START + 2)
    assert got.ok.tolist() == [True, True] == reference(batch, [sink]).ok.tolist()
    assert got.errors == {}


def test_a_record_the_emit_stage_returned_twice_fails() -> None:
    batch = Batch(np.array([11], np.int64), [True], [False], np.array([0], np.int64), 1)
    table = pa.concat_tables([batch.emit_table(), batch.emit_table()])
    got = settle(table, START, START + 1)
    assert got.ok.tolist() == [False]
    assert got.errors == {START: "the emit stage returned the record 2 times"}


def test_sink_rows_without_a_root_or_id_ack_nothing_and_fail_nothing() -> None:
    batch = Batch(np.array([2**62 + 1], np.int64), [True], [False], np.array([1], np.int64), 1)
    roots, ids = batch.derived()
    sink = pa.table(
        {
            ROOT: pa.array([roots[0], None, roots[0]], pa.int64()),
            ID: pa.array([None, ids[0], ids[0]], pa.int64()),
            "ok": [False, False, True],
            "error": ["x", "y", None],
        }
    )
    got = settle(partials(batch, [sink], 1), START, START + 1)
    assert got.ok.tolist() == [True] and got.errors == {}
    missing = settle(partials(batch, [sink.slice(0, 2)], 1), START, START + 1)
    assert missing.errors == {START: INCOMPLETE}


def test_a_row_past_the_batch_is_a_clear_error() -> None:
    batch = Batch(np.array([1], np.int64), [True], [False], np.array([0], np.int64), 1)
    with pytest.raises(ValueError, match="row 5 outside the batch rows 3..4"):
        settle(batch.emit_table(), START - 2, START)


@pytest.mark.parametrize("name", ["_sink_vals", "_ack_val", "_root"])
def test_a_fan_out_schema_may_not_use_the_stage_columns(name: str) -> None:
    from kinesis_spout.spark import fan_out
    from kinesis_spout.spark.process.contract import ProcessingContractError
    from kinesis_spout.spark.process.runner import SparkRunner

    process = fan_out(lambda r: [], pa.schema([pa.field(name, pa.int64())]), [lambda d: None], "f")
    runner = SparkRunner(None, process)
    with pytest.raises(ProcessingContractError, match=f"reserved names \\['{name}'\\]"):
        runner._fan_out_schemas(process)
