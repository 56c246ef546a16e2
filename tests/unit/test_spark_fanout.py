"""Fan-out anchoring with the XOR acker: derived ids and the emit stage (no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from kinesis_spout.spark import InputRecord
from kinesis_spout.spark.process.arrow import (
    ROOT,
    ROW,
    records_to_arrow,
)
from kinesis_spout.spark.process.fanout import (
    ID,
    ack_vals,
    derived_ids,
    derived_rows,
    edge_ids,
    run_emit,
    signed64,
    to_signed,
    to_unsigned,
    xor_by_group,
    xor_by_key,
)

U = np.uint64


def u64(values: list[int]) -> np.ndarray[Any, np.dtype[np.uint64]]:
    return np.array(values, dtype=np.uint64)


def i64(values: list[int]) -> np.ndarray[Any, np.dtype[np.int64]]:
    return np.array(values, dtype=np.int64)


# --- id arithmetic ---------------------------------------------------------------


def test_derived_ids_are_distinct_non_zero_and_the_same_when_recomputed() -> None:
    roots = u64([1, 2**63 + 7, 12345])
    counts = i64([3, 0, 1000])
    ids = derived_ids(roots, counts)
    assert len(ids) == 1003
    assert len(set(ids.tolist())) == 1003
    assert (ids != 0).all()
    assert (derived_ids(roots, counts) == ids).all()
    # a record's ids depend only on its own root and position
    assert (derived_ids(roots[2:], counts[2:]) == ids[3:]).all()


def test_each_sink_gets_its_own_edge_ids() -> None:
    ids = derived_ids(u64([42]), i64([5]))
    e0, e1 = edge_ids(ids, 0), edge_ids(ids, 1)
    assert not set(e0.tolist()) & set(e1.tolist())
    assert (edge_ids(ids, 0) == e0).all()


def test_xor_by_group_handles_empty_groups() -> None:
    vals = u64([1, 2, 4, 8])
    assert xor_by_group(vals, i64([0, 2, 0, 2])).tolist() == [0, 3, 0, 12]
    assert xor_by_group(u64([]), i64([0, 0])).tolist() == [0, 0]


def test_xor_by_key_groups_unsorted_keys() -> None:
    keys, xors = xor_by_key(i64([5, -3, 5, 5]), u64([1, 2, 4, 8]))
    assert keys.tolist() == [-3, 5] and xors.tolist() == [2, 13]


def test_ack_val_is_zero_exactly_when_every_edge_is_xored_back() -> None:
    roots, counts = u64([99]), i64([4])
    val = int(ack_vals(roots, counts, 2)[0])
    ids = derived_ids(roots, counts)
    acc = 0
    for s in range(2):
        for e in edge_ids(ids, s).tolist():
            acc ^= e
    assert val == acc != 0
    assert ack_vals(roots, i64([0]), 2).tolist() == [0]


def test_signed_and_unsigned_views_round_trip() -> None:
    vals = u64([0, 1, 2**63, 2**64 - 1])
    assert to_unsigned(to_signed(vals)).tolist() == vals.tolist()
    assert signed64(2**64 - 1) == -1 and signed64(5) == 5


# --- the executor side ------------------------------------------------------------


def make_input(sentences: list[bytes], roots: list[int]) -> pa.Table:
    from kinesis_spout.records import Record
    from tracker import SequenceKey

    records = [
        Record("s", "shardId-0", str(i + 1), 0, "pk", d, datetime.now(UTC), SequenceKey(i + 1))
        for i, d in enumerate(sentences)
    ]
    return records_to_arrow(records, roots)


def split(record: InputRecord) -> list[str]:
    text = record.data.decode()
    if text.startswith("BAD"):
        raise ValueError(f"cannot split {text!r}")
    return text.split()


WORD = pa.schema([pa.field("word", pa.string())])


def run_stage(
    table: pa.Table, emit: Any = split, schema: pa.Schema = WORD, sinks: int = 1
) -> pa.Table:
    batches = list(run_emit(emit, schema, sinks, table.to_batches()))
    return pa.Table.from_batches(batches)


def test_emit_stage_returns_a_status_per_record_and_the_derived_rows() -> None:
    table = make_input([b"a b c", b"BAD one", b""], [11, 22, 33])
    out = run_stage(table)
    status = out
    derived = derived_rows(out, WORD.names)
    assert status.column(ROW).to_pylist() == [0, 1, 2]
    assert status.column("_ok").to_pylist() == [True, False, True]
    assert status.column("_error").to_pylist()[1] == "ValueError: cannot split 'BAD one'"
    assert derived.column("word").to_pylist() == ["a", "b", "c"]
    assert derived.column(ROOT).to_pylist() == [11, 11, 11]
    # the status's ack-val is the XOR of the edges of the derived rows it announced
    ids = to_unsigned(derived.column(ID).to_numpy())
    expected = 0
    for e in edge_ids(ids, 0).tolist():
        expected ^= e
    vals = status.column("_ack_val").to_pylist()
    assert (vals[0] & (2**64 - 1)) == expected
    assert vals[1] == 0 and vals[2] == 0  # failed, and nothing derived


def test_derived_records_may_be_tuples_dicts_or_single_values() -> None:
    schema = pa.schema([pa.field("w", pa.string()), pa.field("n", pa.int64())])

    def emit(record: InputRecord) -> list[Any]:
        return [("x", 1), {"w": "y", "n": 2}, {"w": "z"}]

    out = run_stage(make_input([b"."], [1]), emit, schema)
    derived = derived_rows(out, schema.names)
    assert derived.column("w").to_pylist() == ["x", "y", "z"]
    assert derived.column("n").to_pylist() == [1, 2, None]


def test_a_one_field_schema_takes_plain_values_and_the_other_shapes_alike() -> None:
    """Plain values take a fast path; tuples, dicts and other types the general one:
    the rows are the same either way, and a bad shape still fails only its record."""
    answers = {
        b"plain": ["a", "b"],
        b"shaped": [("a",), {"word": "b"}, ["c"]],
        b"mixed": ["a", ("b",)],
        b"unknown": [{"word": "a", "extra": 1}],
        b"none": [None],
    }
    out = run_stage(make_input(list(answers), [1, 2, 3, 4, 5]), lambda r: answers[r.data])
    status = out
    assert status.column("_ok").to_pylist() == [True, True, True, False, True]
    assert "unknown fields ['extra']" in status.column("_error").to_pylist()[3]
    derived = derived_rows(out, WORD.names)
    assert derived.column("word").to_pylist() == ["a", "b", "a", "b", "c", "a", "b", None]
    assert derived.column(ROOT).to_pylist() == [1, 1, 2, 2, 2, 3, 3, 5]


def test_a_record_whose_derived_values_do_not_fit_fails_alone() -> None:
    schema = pa.schema([pa.field("n", pa.int64())])

    def emit(record: InputRecord) -> list[Any]:
        return ["not a number"] if record.data == b"bad" else [1, 2]

    out = run_stage(make_input([b"ok", b"bad", b"ok"], [1, 2, 3]), emit, schema)
    status = out
    assert status.column("_ok").to_pylist() == [True, False, True]
    assert "does not fit the schema" in status.column("_error").to_pylist()[1]
    derived = derived_rows(out, schema.names)
    assert derived.column(ROOT).to_pylist() == [1, 1, 3, 3]


def test_a_tuple_of_the_wrong_width_fails_its_record_with_the_field_names() -> None:
    out = run_stage(make_input([b"x"], [1]), lambda r: [("a", "b")])
    status = out
    assert status.column("_ok").to_pylist() == [False]
    assert "2 values for 1 fields ['word']" in status.column("_error").to_pylist()[0]
