"""The per-record style's sandbox: a record that kills the process running it, or hangs,
is failed alone, and nothing that ran runs again (retry plans: no Kinesis needed)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kit import spout_config

from kinesis_spout.records import GetterPosition, Record
from kinesis_spout.spark.plan import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.process.fastretry import FastRetry
from kinesis_spout.spark.sandbox import Sandbox, after_loss
from tracker import SequenceKey

SHARD = "shardId-000000000000"


def record(seq: int, data: bytes = b"ok") -> Record:
    return Record("st", SHARD, str(seq), 0, "pk", data, None, SequenceKey(seq, 0))


def retry_plan(records: list[Record], task: int = 0) -> ReadPlan:
    return ReadPlan(task, "st", SHARD, None, retries=tuple(records))


def settings(**kw: Any) -> ReadSettings:
    return replace(ReadSettings("us-east-1", None, 100, 5.0, 0.1, 1.0, 1.0), **kw)


class Logged:
    """The function under test: each call noted in a file (the child's calls are seen
    from the test's process); ``kill`` ends the process, ``hang`` sleeps, ``fail`` raises."""

    def __init__(self, log: Path) -> None:
        self.log = str(log)

    def __call__(self, r: Record) -> None:
        with open(self.log, "a") as f:
            f.write(f"{r.sequence_number} {os.getpid()}\n")
        if r.data == b"kill":
            os._exit(3)
        if r.data == b"hang":
            time.sleep(3600)
        if r.data == b"fail":
            raise ValueError(f"bad record {r.sequence_number}")


def calls(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox()
    yield box
    box._forget([])


def statuses(results: list[ReadResult]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for res in results:
        for i, seq in enumerate(res.seqs):
            out[seq] = None if res.ok[i] else res.errors[i]
    return out


def test_a_record_that_kills_the_process_is_failed_alone_and_the_rest_run_once(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    records = [record(i, b"kill" if i == 3 else b"ok") for i in range(1, 7)]
    results = sandbox.run([retry_plan(records)], settings(), Logged(log), 0)

    assert calls(log) == ["1", "2", "3", "4", "5", "6"]  # each once, the killer too
    got = statuses(results)
    assert [s for s, e in got.items() if e is None] == ["1", "2", "4", "5", "6"]
    assert "died (exit code 3)" in (got["3"] or "")
    failed = [r.failed[i] for r in results for i in r.failed]
    assert [f.data for f in failed] == [b"kill"] and failed[0].attempt == 1
    assert sandbox.lost == 1


def test_a_record_that_hangs_is_failed_alone_at_the_timeout(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    records = [record(1), record(2, b"hang"), record(3)]
    results = sandbox.run([retry_plan(records)], settings(record_timeout=0.5), Logged(log), 0)

    assert calls(log) == ["1", "2", "3"]
    got = statuses(results)
    assert got["1"] is None and got["3"] is None
    assert "ran past task_timeout (0.5s)" in (got["2"] or "")


def test_a_record_that_raises_is_failed_and_the_child_is_kept_across_tasks(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    first = sandbox.run([retry_plan([record(1, b"fail"), record(2)])], settings(), Logged(log), 0)
    second = sandbox.run([retry_plan([record(3)])], settings(), Logged(log), 1)

    assert statuses(first) == {"1": "ValueError: bad record 1", "2": None}
    assert statuses(second) == {"3": None}
    pids = {line.split()[1] for line in log.read_text().splitlines()}
    assert len(pids) == 1 and pids != {str(os.getpid())} and sandbox.lost == 0


def test_fast_retries_count_and_a_failure_keeps_its_last_delivery(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    cfg = spout_config(fast_retries=True, retry_limit=3, retry_backoff=0.0)
    results = sandbox.run(
        [retry_plan([record(1, b"fail"), record(2)])],
        settings(fast=FastRetry.of(cfg)),
        Logged(tmp_path / "calls"),
        0,
    )

    (res,) = results
    assert calls(tmp_path / "calls").count("1") == res.failed[0].attempt > 1
    assert res.retried == res.failed[0].attempt - 1


def test_records_of_several_plans_after_a_lost_child_run_in_a_new_one(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    plans = [
        retry_plan([record(1), record(2, b"kill"), record(3)], task=0),
        retry_plan([record(4), record(5)], task=0),
    ]
    results = sandbox.run(plans, settings(), Logged(log), 0)

    assert sorted(calls(log)) == ["1", "2", "3", "4", "5"]
    got = statuses(results)
    assert {s for s, e in got.items() if e is not None} == {"2"}
    assert sorted(got) == ["1", "2", "3", "4", "5"]


def test_the_sink_gets_the_ok_rows_of_every_child(sandbox: Sandbox, tmp_path: Path) -> None:
    from kinesis_spout.spark.process.sinks import read_parquet_dir

    sink = tmp_path / "sink"
    records = [record(1), record(2, b"kill"), record(3), record(4, b"fail")]
    sandbox.run(
        [retry_plan(records)], settings(sink=f"parquet://{sink}"), Logged(tmp_path / "c"), 7
    )

    table = read_parquet_dir(sink)
    assert table is not None
    assert sorted(table.column("sequenceNumber").to_pylist()) == ["1", "3"]


def _loaded_slowly(log: str) -> Logged:
    time.sleep(1.0)  # a child that takes a while before its first record (imports, a read)
    return Logged(Path(log))


class SlowToLoad(Logged):
    """:class:`Logged`, unpickled in the child only after a second."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_loaded_slowly, (self.log,))


def test_a_task_after_a_hang_is_not_taken_for_one(sandbox: Sandbox, tmp_path: Path) -> None:
    """The board a hung child leaves says "in a record since long ago": the next task
    starts from a clean board (a stale one killed the next child before its first
    record, and the next, ...)."""
    log = tmp_path / "calls"
    quick = settings(record_timeout=0.5)
    hung = sandbox.run([retry_plan([record(1, b"hang")])], quick, Logged(log), 0)
    assert "ran past task_timeout" in (statuses(hung)["1"] or "")
    after = sandbox.run([retry_plan([record(2), record(3)])], quick, SlowToLoad(log), 1)
    assert statuses(after) == {"2": None, "3": None} and sandbox.lost == 1


def read_run(shard: str, keys: list[tuple[int, int]]) -> Any:
    """A read plan's run in the worker, its child having announced and done ``keys``
    (one page) but not yet said how the read ended."""
    from kinesis_spout.spark.sandbox import _PlanRun

    plan = ReadPlan(0, "st", shard, GetterPosition(after=SequenceKey(10, 0)), limit=len(keys))
    run = _PlanRun(plan, ReadResult.for_plan(plan))
    run.page([str(q) for q, _ in keys], [s for _, s in keys], None)
    return run


def test_a_read_cut_inside_a_kpl_aggregate_goes_on_inside_it_after_a_lost_child() -> None:
    """Shard a's read took the first user record of aggregate 67 (its limit cut the
    page there) and processed it; the child then died on shard b's killer before it
    said how a's read ended. a's next read must start *at* 67 (its sub-records after 0
    still to come), not after it: that lost them (chaos seed 3, 14 records)."""
    cut = read_run("a", [(66, 0), (66, 1), (67, 0)])
    killer = read_run("b", [(80, 0)])

    done, again = after_loss([cut, killer], "died", (True, 1, 0, 0.0))

    assert again == [] and done == [cut, killer]
    position = cut.res.end.position
    assert position.after == SequenceKey(67, 0) and position.after_whole is False
    assert position.iterator is None
    assert cut.res.end.taken == 3
    # ... and 67 counts as a multi-record aggregate: a checkpoint at 67:0 is held back
    # (saved as "67", a restart would read on after the whole record).
    assert cut.res.end.aggregates == (66, 67)


def test_a_read_whose_next_record_came_knows_where_its_kinesis_record_ended() -> None:
    """A record in progress that starts a new Kinesis record ends the read after the
    whole one before it; one inside the same aggregate, inside it."""
    whole = read_run("a", [(66, 0), (66, 1), (67, 0)])
    inside = read_run("b", [(70, 0), (70, 1), (70, 2)])

    after_loss([whole], "died", (True, 0, 2, 0.0))
    after_loss([inside], "died", (True, 0, 2, 0.0))

    assert whole.res.end.position.after == SequenceKey(66, 1)
    assert whole.res.end.position.after_whole is True
    assert inside.res.end.position.after == SequenceKey(70, 1)
    assert inside.res.end.position.after_whole is False
