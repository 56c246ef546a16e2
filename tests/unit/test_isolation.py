"""Poison isolation (pure: no Spark): splitting, judging."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis_spout.spark import isolation
from kinesis_spout.spark.isolation import (
    LONE_FAILURES,
    BatchFailedError,
    Cut,
    Isolation,
    PoisonJudge,
    Wording,
    run_split,
    split_budget,
)
from kinesis_spout.spark.process.contract import ProcessingContractError
from kinesis_spout.spark.read.jobs import TASK_WORDS


def _halves(rows: range) -> list[range]:
    if len(rows) == 1:
        return []
    mid = (rows.start + rows.stop) // 2
    return [range(rows.start, mid), range(mid, rows.stop)]


ROWS: Cut[range, range, int] = Cut(
    halves=_halves,
    lone=lambda rows: rows.start,
    describe=lambda rows: f"rows {rows.start}..{rows.stop - 1}",
)
"""A range of rows halved down to one row, with jobs that return their rows."""
RANGES = ROWS
ROW_WORDS = Wording(
    lone="records",
    left="the unfinished records stay unacknowledged for a restart",
    over="records fail it as a whole",
    runs="splits",
)


class Crash(RuntimeError):
    """A Spark job that failed (a worker died on one of its records)."""


def rows_job(killers: set[int], ran: list[range]) -> Callable[[range], list[range]]:
    """A job over a range of rows: fails when it holds a killer, else returns its rows."""

    def run(rows: range) -> list[range]:
        ran.append(rows)
        if killers.intersection(rows):
            raise Crash("Python worker exited unexpectedly")
        return [rows]

    return run


def split(
    n: int, killers: set[int], *, budget: int | None = None, stopping: bool = False
) -> tuple[list[int], Isolation[int], list[range]]:
    """Rows done (in order), the book-keeping, and every job run."""
    iso: Isolation[int] = Isolation(splits_left=split_budget(n) if budget is None else budget)
    ran: list[range] = []
    done = run_split(
        rows_job(killers, ran), RANGES, iso, range(n), batch_id=7, stopping=lambda: stopping
    )
    return [r for part in done for r in part], iso, ran


def test_the_split_budget_grows_with_log2_of_the_size() -> None:
    assert [split_budget(n) for n in (0, 1, 2, 3, 16, 17, 10_000)] == [8, 8, 8, 12, 20, 24, 60]


def test_rows_are_halved_down_to_one_row() -> None:
    assert ROWS.halves(range(16)) == [range(0, 8), range(8, 16)]
    assert ROWS.halves(range(3, 8)) == [range(3, 5), range(5, 8)]
    assert ROWS.halves(range(5, 6)) == []
    assert ROWS.lone(range(5, 6)) == 5 and ROWS.describe(range(3, 8)) == "rows 3..7"
    assert ROWS.rest(range(4), []) is None


def test_a_crashing_row_fails_alone_and_the_others_run() -> None:
    done, iso, _ = split(16, {5})
    assert done == [r for r in range(16) if r != 5]
    assert [row for row, _ in iso.alone] == [5] and iso.splits == 4  # 16 -> 8 -> 4 -> 2 -> 1
    assert iso.succeeded and not iso.exhausted and iso.abandoned == 0
    assert iso.alone[0][1] == iso.last_error == "Crash: Python worker exited unexpectedly"


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 64), killers=st.sets(st.integers(0, 63), max_size=6))
def test_every_row_runs_once_or_fails_alone_within_the_budget(n: int, killers: set[int]) -> None:
    bad = {k for k in killers if k < n}
    done, iso, _ = split(n, bad)
    assert len(done) == len(set(done)) and not bad.intersection(done)
    assert done == sorted(done)
    if not iso.exhausted:
        assert [row for row, _ in iso.alone] == sorted(bad)
        assert set(done) | bad == set(range(n))
    assert iso.splits <= split_budget(n)


def test_a_used_up_budget_leaves_the_rest_unfinished() -> None:
    done, iso, ran = split(8, {0, 7}, budget=1)
    assert iso.exhausted and iso.splits == 1 and iso.abandoned == 2 and not iso.alone
    assert done == [] and ran == [range(8), range(4), range(4, 8)]


def test_a_failure_while_stopping_is_abandoned_not_split(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        done, iso, ran = split(8, {3}, stopping=True)
    assert done == [] and ran == [range(8)] and iso.abandoned == 1 and not iso.alone
    assert iso.splits == 0 and iso.last_error.startswith("Crash")
    assert "abandoning rows 0..7 of micro-batch 7 while stopping: Crash" in caplog.text


def test_a_cancelled_batch_is_given_up_without_a_word(caplog: pytest.LogCaptureFixture) -> None:
    iso: Isolation[int] = Isolation(splits_left=8)
    ran: list[range] = []
    with caplog.at_level(logging.WARNING):
        done = run_split(
            rows_job({1}, ran),
            RANGES,
            iso,
            range(4),
            batch_id=1,
            stopping=lambda: False,
            cancelled=lambda: True,
        )
    assert done == [] and iso.abandoned == 1 and not iso.alone and caplog.text == ""


def test_a_batch_given_up_while_a_part_runs_runs_no_more_parts() -> None:
    """The driver gives the micro-batch up while its first re-run part runs (that part
    then fails, its Spark job cancelled): the other parts, and what is left, never run."""
    iso: Isolation[int] = Isolation(splits_left=8)
    ran: list[range] = []
    given_up = [False]
    job = rows_job({1, 6}, ran)

    def run(rows: range) -> list[range]:
        if len(ran) == 1:  # the first part: given up meanwhile
            given_up[0] = True
        return job(rows)

    done = run_split(
        run,
        RANGES,
        iso,
        range(8),
        batch_id=1,
        stopping=lambda: False,
        cancelled=lambda: given_up[0],
    )
    assert ran == [range(8), range(4)]  # the whole job, then its first half only
    assert done == [] and not iso.alone and iso.abandoned == 2


def test_a_broken_processing_contract_is_raised_at_once() -> None:
    def run(rows: range) -> list[range]:
        raise ProcessingContractError("no status column")

    with pytest.raises(ProcessingContractError):
        iso: Isolation[int] = Isolation(splits_left=8)
        run_split(run, RANGES, iso, range(4), batch_id=1, stopping=lambda: False)


# A read of a shard of records 1..: (first, limit), halved to its first half; the rest
# from where a half that read ok stopped (as executor reads cut a read plan).
Read = tuple[int, int]
READS: Cut[Read, Read, int] = Cut(
    halves=lambda g: [(g[0], g[1] // 2)] if g[1] > 1 else [],
    lone=lambda g: g[0],
    describe=lambda g: f"a read of {g[1]} from {g[0]}",
    rest=lambda g, done: (g[0] + done[-1][1], g[1] - done[-1][1]) if done else None,
)


def test_the_rest_of_a_group_runs_after_its_parts_ran_fine() -> None:
    """A binary search: the killer at 6 of a read of 8 from 1 is found alone."""
    ran: list[Read] = []

    def run(g: Read) -> list[Read]:
        ran.append(g)
        if g[0] <= 6 < g[0] + g[1]:
            raise Crash("died")
        return [g]

    iso: Isolation[int] = Isolation(splits_left=20)
    done = run_split(run, READS, iso, (1, 8), batch_id=1, stopping=lambda: False)
    assert done == [(1, 4), (5, 1)] and [first for first, _ in iso.alone] == [6]
    assert ran == [(1, 8), (1, 4), (5, 4), (5, 2), (5, 1), (6, 1)]


def test_no_rest_runs_after_a_part_failed_alone() -> None:
    iso: Isolation[int] = Isolation(splits_left=20)
    ran: list[Read] = []

    def run(g: Read) -> list[Read]:
        ran.append(g)
        raise Crash("died")

    assert run_split(run, READS, iso, (1, 2), batch_id=1, stopping=lambda: False) == []
    assert ran == [(1, 2), (1, 1)] and [first for first, _ in iso.alone] == [1]


def lone(n: int, *, succeeded: bool = False, exhausted: bool = False) -> Isolation[str]:
    """A batch where ``n`` failed alone (named ``r0``...)."""
    alone = [(f"r{i}", "Crash: died") for i in range(n)]
    return Isolation(
        splits_left=0,
        splits=3,
        succeeded=succeeded,
        exhausted=exhausted,
        alone=alone,
        last_error="Crash: died",
    )


def ids(n: int) -> list[str]:
    return [f"r{i}" for i in range(n)]


def test_lone_failures_beside_a_part_that_ran_are_poison() -> None:
    judge = PoisonJudge(ROW_WORDS)
    judge.judge(1, lone(5, succeeded=True), ids(5))
    assert judge.healthy and list(judge.poison) == ids(5)


def test_a_few_lone_failures_after_a_batch_that_ran_are_poison() -> None:
    judge = PoisonJudge(ROW_WORDS)
    judge.healthy = True
    judge.judge(1, lone(LONE_FAILURES), ids(LONE_FAILURES))
    assert not judge.healthy  # nothing ran in this one
    with pytest.raises(BatchFailedError, match="failed as a whole"):
        judge.judge(2, lone(1), ["other"])  # and nothing ran before it either


def test_more_lone_failures_than_a_few_with_nothing_run_are_systematic() -> None:
    judge = PoisonJudge(ROW_WORDS)
    judge.healthy = True
    with pytest.raises(BatchFailedError) as err:
        judge.judge(4, lone(LONE_FAILURES + 1), ids(LONE_FAILURES + 1))
    assert str(err.value) == (
        "micro-batch 4 failed as a whole even when split 3 times (3 records failing alone); "
        "the unfinished records stay unacknowledged for a restart; last error: Crash: died"
    )
    assert judge.poison == {}  # nothing failed, nothing remembered


def test_the_retry_of_a_known_poison_record_is_poison_with_nothing_run() -> None:
    judge = PoisonJudge(TASK_WORDS)
    judge.remember(["r0"])
    judge.judge(1, lone(1), ["r0"])
    with pytest.raises(BatchFailedError):  # a lone failure with no id yet is not known
        judge.judge(2, lone(1), [])


def test_the_probe_decides_only_when_nothing_else_does() -> None:
    asked: list[str] = []

    def probe(ok: bool) -> Callable[[str], bool]:
        def run(first: str) -> bool:
            asked.append(first)
            return ok

        return run

    judge = PoisonJudge(TASK_WORDS)
    judge.judge(1, lone(1), [], probe=probe(True))  # nothing ran before: ask
    assert asked == ["r0"]
    with pytest.raises(BatchFailedError):
        judge.judge(2, lone(1), [], probe=probe(False))
    judge.judge(3, lone(2, succeeded=True), [], probe=probe(False))  # something ran
    judge.remember(["k"])
    judge.judge(4, lone(1), ["k"], probe=probe(False))  # known poison
    with pytest.raises(BatchFailedError):  # too many to ask about
        judge.judge(5, lone(LONE_FAILURES + 1), [], probe=probe(True))
    assert asked == ["r0", "r0"]


def test_a_used_up_budget_stops_the_job_in_each_modes_words() -> None:
    rows, tasks = PoisonJudge(ROW_WORDS), PoisonJudge(TASK_WORDS)
    with pytest.raises(BatchFailedError) as err:
        rows.judge(3, lone(1, exhausted=True), ids(1))
    assert str(err.value) == (
        "micro-batch 3 failed as a whole even when split 3 times (1 records failing alone, "
        "split budget used up); the unfinished records stay unacknowledged for a restart; "
        "last error: Crash: died"
    )
    with pytest.raises(BatchFailedError) as err:
        tasks.judge(3, lone(1, exhausted=True), [])
    assert str(err.value) == (
        "micro-batch 3 failed as a whole even when split 3 times (1 tasks of one record "
        "failing alone, split budget used up); nothing was failed and the unfinished records "
        "come back after a restart; last error: Crash: died"
    )
    for judge, text in (
        (rows, "more records fail it as a whole than 3 splits can isolate"),
        (tasks, "more tasks fail it than 3 re-runs can isolate"),
    ):
        iso = lone(1, succeeded=True, exhausted=True)
        judge.judge(3, iso, ids(1))  # a part ran: what failed alone is poison
        assert "r0" in judge.poison
        with pytest.raises(BatchFailedError) as err:
            judge.raise_if_exhausted(3, iso)
        assert str(err.value) == f"micro-batch 3: {text}; last error: Crash: died"
    rows.raise_if_exhausted(4, lone(1))  # budget left: nothing to say


def test_the_poison_memory_forgets_the_oldest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolation, "POISON_MEMORY", 3)
    judge = PoisonJudge(ROW_WORDS)
    judge.remember(["a", "b"])
    judge.remember(["c", "d"])
    assert list(judge.poison) == ["b", "c", "d"]
