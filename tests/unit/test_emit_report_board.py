"""The driver's board of a fan-out's read-task reports (pure logic: the accumulator is
stood in for by one that merges as PySpark's does, worker value into driver value;
with real Spark in ``tests/integration/spark/test_emit_reports.py``)."""

from __future__ import annotations

import pickle
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from kinesis_spout.spark.process.settle import PARTIAL_SCHEMA
from kinesis_spout.spark.read.plan import ReadResult
from kinesis_spout.spark.read.reports import EmitReports, Reporter, TaskReport


class Accumulator:
    """PySpark's accumulator as the board sees it: a task's value starts at the param's
    ``zero`` and each ``add`` merges into it; the driver merges a finished task's value
    into its own (``addInPlace``)."""

    def __init__(self, value: Any, param: Any) -> None:
        self.value = value
        self.param = param

    def add(self, term: Any) -> None:  # a task's adds, its value sent when it ends
        task = self.param.addInPlace(self.param.zero(self.value), term)
        self.value = self.param.addInPlace(self.value, task)


def reports() -> EmitReports:
    spark = SimpleNamespace(sparkContext=SimpleNamespace(accumulator=Accumulator))
    return EmitReports(spark)


def task(rows: list[int], plan: int, failed: bool = False, records: int = 0) -> TaskReport:
    """A read task's report: ``rows`` (failed or not), plan ``plan``'s end and, with
    ``records``, that many records whose ``emit`` failed."""
    bad = [(plan, i, record_values(i)) for i in range(records)]
    return TaskReport({plan: partials(rows, failed)}, ends(plan), bad)


def record_values(i: int) -> tuple[object, ...]:
    return ("s", "shard-0", str(100 + i), 0, f"k{i}", b"x%d" % i, None, 1)


def partials(rows: list[int], failed: bool = False) -> pa.RecordBatch:
    n = len(rows)
    return pa.RecordBatch.from_pydict(
        {
            "_row": rows,
            "_root": [r + 100 for r in rows],
            "_sink": [-1] * n,
            "_xor": [0] * n,
            "_failed": [failed] * n,
            "_error": ["e" if failed else None] * n,
        },
        schema=PARTIAL_SCHEMA,
    )


def ends(task: int) -> list[bytes]:
    return [pickle.dumps(ReadResult(task, f"shard-{task}"))]


def test_the_reports_of_every_task_are_taken_in_task_order() -> None:
    board = reports()
    reporter = board.open(7)
    reporter.report(1, task([3, 4], 1))
    reporter.report(0, task([0, 1, 2], 0))
    got = board.take(7, 2)
    assert got is not None
    assert got.partials.column("_row").to_pylist() == [0, 1, 2, 3, 4]
    assert [r.shard_id for r in got.results] == ["shard-0", "shard-1"]


def test_a_task_that_did_not_report_leaves_the_job_to_the_statuses_job() -> None:
    board = reports()
    board.open(1).report(0, task([0], 0))
    assert board.take(1, 2) is None
    assert board.take(1, 1) is not None


def test_the_same_report_twice_is_whole_and_a_different_one_is_not() -> None:
    board = reports()
    same = board.open(1)
    same.report(0, task([0, 1], 0))
    same.report(0, task([0, 1], 0))  # the task computed again
    assert board.take(1, 1) is not None
    other = board.open(2)
    other.report(0, task([0, 1], 0))
    other.report(0, task([0, 1], 0, failed=True))  # emit answered otherwise
    assert board.take(2, 1) is None


def test_a_closed_job_keeps_nothing_and_a_late_report_is_dropped() -> None:
    board = reports()
    reporter = board.open(3)
    reporter.report(0, task([0], 0))
    board.close(3)
    reporter.report(0, task([0], 0))  # a speculative copy ending late
    assert board.take(3, 1) is None
    Reporter(board._accumulator, 9).report(0, task([0], 0))  # never opened
    assert board.take(9, 1) is None


@pytest.mark.parametrize("tasks", [0, 1])
def test_a_task_that_read_nothing_reports_its_ends_alone(tasks: int) -> None:
    board = reports()
    reporter = board.open(1)
    for t in range(tasks):
        reporter.report(t, TaskReport({}, ends(t)))
    got = board.take(1, tasks)
    assert got is not None
    assert got.partials.num_rows == 0 and len(got.results) == tasks


def test_the_records_whose_emit_failed_come_with_the_reports_and_a_second_copy_is_seen() -> None:
    board = reports()
    reporter = board.open(1)
    reporter.report(0, task([0, 1], 0, failed=True, records=2))
    got = board.take(1, 1)
    assert got is not None and not got.again
    assert sorted(got.failed) == [(0, 0), (0, 1)]
    assert got.failed[(0, 1)].partition_key == "k1" and got.failed[(0, 1)].data == b"x1"
    reporter.report(0, task([0, 1], 0, failed=True, records=2))  # computed again, the same
    again = board.take(1, 1)
    assert again is not None and again.again
