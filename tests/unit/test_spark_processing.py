"""The user's processing styles, their loading, and the row sinks (no Spark)."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kit import spout_config

from kinesis_spout.config import SpoutConfig
from kinesis_spout.errors import ConfigError
from kinesis_spout.records import Record
from kinesis_spout.spark.process.arrow import ROW, records_to_arrow
from kinesis_spout.spark.process.fastretry import FastRetry
from kinesis_spout.spark.process.sinks import ConsoleSink, ParquetSink, open_sink, read_parquet_dir
from kinesis_spout.spark.process.styles import (
    FanOutProcessor,
    InputRecord,
    RecordProcessor,
    TransformProcessor,
    as_processor,
    batch_records,
    dataframe_transform,
    fan_out,
    load_processor,
    per_record,
    processor_factory,
    run_records,
)
from tracker import SequenceKey


def records(n: int, attempt: int = 1) -> list[Record]:
    return [
        Record(
            "orders",
            "shardId-000000000002",
            str(100 + i),
            i % 2,
            f"pk{i}",
            f"payload {i}".encode(),
            datetime(2026, 5, 1, tzinfo=UTC),
            SequenceKey(100 + i, i % 2),
            attempt,
        )
        for i in range(n)
    ]


def statuses(fn: Callable[[Record], object], n: int = 3) -> list[tuple[int, bool, str | None]]:
    """The per-record runner on ``n`` records that went through Arrow and back, as a
    read task runs it: ``(row, ok, error)`` per record."""
    got: list[tuple[bool, str | None]] = []

    def report(record: Record, error: str | None, attempt: int) -> None:
        got.append((error is None, error))

    rows: list[int] = []
    for batch in records_to_arrow(records(n)).to_batches(max_chunksize=2):
        rows += batch.column(ROW).to_pylist()
        run_records(fn, batch_records(batch), FastRetry(), report)
    return [(row, ok, err) for row, (ok, err) in zip(rows, got, strict=True)]


def test_the_function_sees_every_field_of_the_record() -> None:
    seen: list[InputRecord] = []
    assert statuses(seen.append, 2) == [(0, True, None), (1, True, None)]
    r = seen[1]
    assert (r.stream_name, r.shard_id, r.sequence_number, r.sub_sequence_number) == (
        "orders",
        "shardId-000000000002",
        "101",
        1,
    )
    assert (r.partition_key, r.data, r.attempt) == ("pk1", b"payload 1", 1)
    assert r.approximate_arrival == datetime(2026, 5, 1, tzinfo=UTC)
    assert r.message_id == "shardId-000000000002:101:1"
    assert seen[0].message_id == "shardId-000000000002:100"
    assert seen[0].message_id == records(1)[0].message_id  # the spout's id


def test_an_exception_fails_only_its_record_with_type_and_message() -> None:
    def fn(r: InputRecord) -> None:
        if r.sequence_number == "101":
            raise KeyError("missing field 'amount'")

    assert statuses(fn) == [
        (0, True, None),
        (1, False, "KeyError: \"missing field 'amount'\""),
        (2, True, None),
    ]


def test_system_exit_is_not_swallowed() -> None:
    def fn(r: InputRecord) -> None:
        sys.exit(3)

    with pytest.raises(SystemExit):
        statuses(fn)


def test_batch_records_come_in_row_order() -> None:
    table = records_to_arrow(records(3)).slice(1, 2)
    rows = [
        (row, rec.sequence_number)
        for b in table.to_batches()
        for row, rec in zip(b.column(ROW).to_pylist(), batch_records(b), strict=True)
    ]
    assert rows == [(1, "101"), (2, "102")]


# --- loading ------------------------------------------------------------------------


def plain(record: InputRecord) -> None:
    return None


@processor_factory
def factory(config: SpoutConfig) -> TransformProcessor:
    return dataframe_transform(lambda df: df, name=f"for {config.job_name}")


def test_a_plain_function_is_the_per_record_style() -> None:
    p = as_processor(plain)
    assert isinstance(p, RecordProcessor) and p.fn is plain and p.name == "plain"


def test_a_factory_gets_the_config() -> None:
    p = load_processor(f"{__name__}:factory", spout_config(job_name="billing"))
    assert isinstance(p, TransformProcessor) and p.name == "for billing"


def test_a_processor_object_is_used_as_is() -> None:
    fo = fan_out(plain, "w string", [lambda df: None])
    assert as_processor(fo) is fo and isinstance(fo, FanOutProcessor)


def test_a_python_file_can_hold_the_function(tmp_path: Path) -> None:
    f = tmp_path / "my_job_file.py"
    f.write_text("def handle(record):\n    return None\n")
    p = load_processor(f"{f}:handle")
    assert isinstance(p, RecordProcessor) and p.name == "handle"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "module:function"),
        ("not_a_module_xyz:f", "an importable module"),
        (f"{__name__}:missing", "a name defined in"),
        ("/nowhere/job.py:f", "an existing Python file"),
    ],
)
def test_bad_process_specs_name_the_spec(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        load_processor(spec)
    assert err.value.field == "process" and err.value.value == spec


def test_bad_processors_are_refused() -> None:
    with pytest.raises(ConfigError, match="at least one sink"):
        fan_out(plain, "w string", [])
    with pytest.raises(ConfigError, match="callable"):
        per_record(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="a function, a processor"):
        as_processor(42)


# --- sinks -------------------------------------------------------------------------------


def test_parquet_sink_files_appear_whole_and_read_back(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path / "out")
    t1 = records_to_arrow(records(3)).drop_columns(["_row"])
    sink.write(0, t1)
    sink.write(1, t1.slice(0, 0))  # empty batches write nothing
    sink.write(2, t1.slice(1, 1))
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(files) == 2 and all(f.startswith("part-") for f in files)
    back = read_parquet_dir(tmp_path / "out")
    assert back is not None
    assert back.column("sequenceNumber").to_pylist() == ["100", "101", "102", "101"]
    assert back.column("data").to_pylist()[0] == b"payload 0"
    assert read_parquet_dir(tmp_path / "nothing") is None


def test_console_sink_prints_a_count_and_the_first_rows() -> None:
    out = io.StringIO()
    ConsoleSink(out, max_rows=2).write(7, records_to_arrow(records(3)).select(["data", "attempt"]))
    text = out.getvalue()
    assert text.startswith("-- batch 7: 3 rows")
    assert "data='payload 0' | attempt=1" in text and "... 1 more" in text


def test_sinks_are_named_by_the_config_value(tmp_path: Path) -> None:
    assert open_sink("none").name == "none"
    assert open_sink("console").name == "console"
    assert open_sink(f"parquet://{tmp_path}").name == "parquet"
    with pytest.raises(ConfigError, match="none, console or parquet"):
        open_sink("kafka://x")
