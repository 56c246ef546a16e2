"""Records to Arrow and statuses back (pure: pyarrow and numpy, no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_spout.records import Record
from kinesis_spout.spark.process.arrow import (
    DATA_COLUMNS,
    MAX_ERROR_CHARS,
    MISSING_STATUS,
    ROOT,
    ROW,
    Statuses,
    arrival_times,
    format_error,
    records_to_arrow,
    statuses_from_arrow,
)
from tracker import SequenceKey


def rec(seq: int, shard: str = "shardId-000000000000", sub: int = 0, attempt: int = 1) -> Record:
    return Record(
        stream_name="s",
        shard_id=shard,
        sequence_number=str(seq),
        sub_sequence_number=sub,
        partition_key=f"pk{seq}",
        data=f"d{seq}".encode(),
        approximate_arrival=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC) if seq % 2 else None,
        key=SequenceKey(seq, sub),
        attempt=attempt,
    )


def status_table(rows: list[int], oks: list[bool | None], errors: list[str | None]) -> pa.Table:
    return pa.table(
        {
            ROW: pa.array(rows, pa.int64()),
            "ok": pa.array(oks, pa.bool_()),
            "error": pa.array(errors, pa.string()),
        }
    )


def test_records_become_one_row_each_in_order_with_the_kinesis_column_names() -> None:
    big = 2**127 + 5  # sequence numbers go past 64 bits: kept as strings
    records = [rec(1), rec(big, shard="shardId-000000000001", sub=3, attempt=2)]
    t = records_to_arrow(records)
    assert t.column_names == [*DATA_COLUMNS, ROW]
    assert t.column("sequenceNumber").to_pylist() == ["1", str(big)]
    assert t.column("shardId").to_pylist() == ["shardId-000000000000", "shardId-000000000001"]
    assert t.column("subSequenceNumber").to_pylist() == [0, 3]
    assert t.column("data").to_pylist() == [b"d1", f"d{big}".encode()]
    assert t.column("attempt").to_pylist() == [1, 2]
    assert t.column(ROW).to_pylist() == [0, 1]
    assert t.schema.field("data").type == pa.binary()
    ts = t.column("approximateArrivalTimestamp").to_pylist()
    assert ts[0] == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_fan_out_tables_carry_the_root_ids() -> None:
    t = records_to_arrow([rec(1), rec(2)], roots=[-5, 7])
    assert t.column(ROOT).to_pylist() == [-5, 7]
    with pytest.raises(ValueError, match="1 ids for 2 records"):
        records_to_arrow([rec(1), rec(2)], roots=[1])


def test_an_empty_batch_is_an_empty_table() -> None:
    assert records_to_arrow([]).num_rows == 0


def test_statuses_fold_to_one_per_record() -> None:
    st = statuses_from_arrow(
        status_table([0, 1, 2], [True, False, True], [None, "ValueError: x", None]), 0, 3
    )
    assert st.ok.tolist() == [True, False, True]
    assert st.errors == {1: "ValueError: x"}
    assert st.ok_rows.tolist() == [0, 2] and st.failed_rows.tolist() == [1]


def test_a_record_with_no_status_fails_and_is_never_acked() -> None:
    st = statuses_from_arrow(status_table([0], [True], [None]), 0, 3)
    assert st.ok.tolist() == [True, False, False]
    assert st.errors == {1: MISSING_STATUS, 2: MISSING_STATUS}


def test_exploded_rows_are_ok_only_if_all_are_and_the_first_error_wins() -> None:
    t = status_table(
        [0, 0, 1, 1, 1], [True, True, True, False, False], [None, None, None, "first", "second"]
    )
    st = statuses_from_arrow(t, 0, 2)
    assert st.ok.tolist() == [True, False]
    assert st.errors == {1: "first"}


def test_a_null_status_is_a_failure_with_a_generic_error() -> None:
    st = statuses_from_arrow(status_table([5, 6], [None, True], [None, None]), 5, 7)
    assert st.ok.tolist() == [False, True]
    assert st.errors == {5: "processing failed"}


def test_statuses_of_a_sub_range_use_the_batch_row_numbers() -> None:
    st = statuses_from_arrow(status_table([4, 5], [False, True], ["e", None]), 4, 6)
    assert st.failed_rows.tolist() == [4]
    assert st.errors == {4: "e"}


def test_a_status_outside_the_range_is_a_bug_named_with_its_row() -> None:
    with pytest.raises(ValueError, match="row 9 outside the batch rows 0..2"):
        statuses_from_arrow(status_table([0, 9], [True, True], [None, None]), 0, 3)


def test_adjacent_statuses_merge() -> None:
    a = Statuses(0, 2, np.array([True, False]), {1: "x"})
    b = Statuses(2, 3, np.array([True]), {})
    m = a.merged(b)
    assert (m.start, m.stop, m.ok.tolist(), m.errors) == (0, 3, [True, False, True], {1: "x"})
    with pytest.raises(ValueError, match="not adjacent"):
        b.merged(a)


def test_errors_name_the_exception_type_and_are_clipped() -> None:
    assert format_error(KeyError("k")) == "KeyError: 'k'"
    assert format_error(RuntimeError()) == "RuntimeError"
    long = format_error(ValueError("x" * 10_000))
    assert len(long) == MAX_ERROR_CHARS and long.endswith("(truncated)")


_TIMES = st.one_of(
    st.none(),
    st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    ),
)


@given(st.lists(st.one_of(_TIMES, st.sampled_from([None, datetime(2026, 11, 27, tzinfo=UTC)]))))
def test_arrival_times_read_back_what_pyarrow_does(values: list[datetime | None]) -> None:
    column = pa.array(values, pa.timestamp("us", tz="UTC"))
    got = arrival_times(column)
    assert got == column.to_pylist() == values
    assert all(v is None or v.utcoffset() is not None for v in got)  # aware, as Records are
    chunked = pa.chunked_array([column, column], pa.timestamp("us", tz="UTC"))
    assert arrival_times(chunked) == values + values


@pytest.mark.parametrize("unit", ["s", "ms", "ns"])
def test_arrival_times_of_another_unit_are_the_same_instants(unit: str) -> None:
    at = datetime(2026, 11, 27, 6, 29, 9, 123000, tzinfo=UTC)
    column = pa.array([at, None], pa.timestamp(unit, tz="Europe/Berlin"))
    expected = [at.replace(microsecond=0) if unit == "s" else at, None]
    assert arrival_times(column) == expected
    assert arrival_times(column)[0].utcoffset().total_seconds() == 0  # type: ignore[union-attr]


def test_arrival_times_of_a_column_that_is_no_timestamp_is_an_error() -> None:
    with pytest.raises(TypeError, match="expected a timestamp column, not int64"):
        arrival_times(pa.array([1, 2]))
