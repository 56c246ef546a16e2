"""A fan-out's ``emit`` in the read task (:mod:`kinesis_spout.spark.read.stage`), no
Spark: the rows a read task returns are the emit stage's rows of the same records."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from kinesis_spout.records import GetterPosition, Record
from kinesis_spout.spark import InputRecord
from kinesis_spout.spark.plan import ReadPlan, ReadResult
from kinesis_spout.spark.process.arrow import DATA_COLUMNS, ROOT, ROW
from kinesis_spout.spark.process.fanout import IDS, derived_column, derived_rows, run_emit
from kinesis_spout.spark.read.stage import FRAME_SCHEMA, META, PLAN, ReadEmitter, stage_batches
from tracker import SequenceKey

WORD = pa.schema([pa.field("word", pa.string())])
FIRST = 2**62 - 10  # roots near the top of the range: first + row stays below 2**63
T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def split(record: InputRecord) -> list[str]:
    text = record.data.decode()
    if text.startswith("BAD"):
        raise ValueError(f"cannot split {text!r}")
    return text.split()


def records(*sentences: bytes, shard: str = "shardId-0") -> list[Record]:
    return [
        Record(
            "s", shard, str(i + 1), 0, f"pk{i}", d, T0 + timedelta(seconds=i), SequenceKey(i + 1)
        )
        for i, d in enumerate(sentences)
    ]


def plan(task: int, size: int, shard: str = "shardId-0") -> ReadPlan:
    return ReadPlan(task, "s", shard, GetterPosition(), limit=size)


def emitted(bases: dict[int, int], reads: list[tuple[ReadPlan, list[Record]]]) -> pa.Table:
    emitter = ReadEmitter(split, WORD, 2, FIRST)
    kept = [(ReadResult.for_plan(p, "exec", 1), rs) for p, rs in reads]
    tasks = [p for p, _ in reads]
    return pa.Table.from_batches(list(stage_batches(kept, tasks, bases, emitter)), emitter.schema)


def test_the_read_rows_are_the_emit_stages_rows_of_the_same_records() -> None:
    """Record rows carry the record, its root (first + row) and its emit status; derived
    rows are what ``run_emit`` makes of the same records and roots."""
    rs = records(b"a b c", b"BAD one", b"", b"d")
    out = emitted({7: 100}, [(plan(7, 10), rs)])
    kept = out.filter(pc.is_null(out.column(META)))
    assert kept.column(ROW).to_pylist() == [100, 101, 102, 103]
    assert kept.column(PLAN).to_pylist() == [7] * 4
    assert kept.column(ROOT).to_pylist() == [FIRST + r for r in range(100, 104)]
    assert kept.column("data").to_pylist() == [r.data for r in rs]
    assert kept.column("approximateArrivalTimestamp").to_pylist() == [
        r.approximate_arrival for r in rs
    ]
    assert kept.column("_ok").to_pylist() == [True, False, True, True]
    assert kept.column("_error").to_pylist()[1] == "ValueError: cannot split 'BAD one'"

    # the same records through the emit stage of driver reads
    table = kept.select([*DATA_COLUMNS, ROW, ROOT])
    stage = pa.Table.from_batches(list(run_emit(split, WORD, 2, table.to_batches())))
    same = [ROW, ROOT, "_ok", "_error", "_ack_val", "_sink_vals", IDS, derived_column("word")]
    assert kept.select(same).to_pylist() == stage.select(same).to_pylist()
    derived = derived_rows(kept, ["word"])
    assert derived.column("word").to_pylist() == ["a", "b", "c", "d"]
    assert derived.column(ROOT).to_pylist() == [FIRST + r for r in (100, 100, 100, 103)]


def test_each_plan_ends_with_its_end_row_even_when_it_read_nothing() -> None:
    out = emitted({0: 0, 1: 5}, [(plan(0, 5), records(b"x y")), (plan(1, 5, "shardId-1"), [])])
    ends = out.filter(pc.is_valid(out.column(META)))
    assert ends.column(PLAN).to_pylist() == [0, 1]
    assert [pickle.loads(b).shard_id for b in ends.column(META).to_pylist()] == [
        "shardId-0",
        "shardId-1",
    ]
    for name in (ROW, ROOT, IDS, "_ok", derived_column("word"), "data"):
        assert ends.column(name).null_count == 2


def test_a_recomputed_read_gives_the_same_rows() -> None:
    """Spark may compute a partition again: the same records give the same rows, ids
    included (they come from the roots, not from randomness on the executor)."""
    reads = [(plan(3, 4), records(b"one two", b"three"))]
    assert emitted({3: 40}, reads).equals(emitted({3: 40}, reads))


def test_a_fan_out_read_schema_is_the_read_columns_then_the_emit_and_derived_ones() -> None:
    emitter = ReadEmitter(split, WORD, 1, 0)
    names = emitter.schema.names
    assert names[: len(FRAME_SCHEMA)] == FRAME_SCHEMA.names
    assert names[len(FRAME_SCHEMA) :] == [
        ROOT,
        "_ok",
        "_error",
        "_ack_val",
        "_sink_vals",
        IDS,
        "_d_word",
    ]
