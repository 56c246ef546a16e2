"""Pure logic of executor reads: sparse tracking, replay windows, result checks, re-runs."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit import spout_config

from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.config import InitialPosition
from kinesis_spout.core.committer import Committer
from kinesis_spout.core.partition import ReplayWindow, ShardPartition
from kinesis_spout.metrics import InMemoryMetrics
from kinesis_spout.records import GetterPosition, ReadEnd, Record
from kinesis_spout.spark.isolation import BatchFailedError
from kinesis_spout.spark.plan import ReadPlan, ReadResult, ReadSettings, StreamTarget, sparse_marks
from kinesis_spout.spark.read.jobs import ReadIsolation, ReadJobs, _halves, _rest
from kinesis_spout.spark.read.rows import RowSpace
from kinesis_spout.spark.read.shuffle import LOST, assemble
from tracker import InflightRecordTracker, SequenceKey

_START = GetterPosition(None, None, True, InitialPosition.TRIM_HORIZON, None)
"""A plan's position at the shard's start."""


def _after(last: int) -> GetterPosition:
    """The position after record ``last`` (1-based; 0: the shard's start)."""
    return dataclasses.replace(_START, after=SequenceKey(last, 0) if last else None)


class _SimulatedSpark:
    class sparkContext:  # noqa: N801 - the attribute PySpark's session has
        defaultParallelism = 2


class SimulatedShardJobs(ReadJobs):
    """:class:`ReadJobs` over a simulated shard of records 1..n: a job whose read would
    take a record in ``killers`` fails as a whole (as a record that fails every task
    that reads it, in a DataFrame style); ``failed_jobs`` counts them."""

    def __init__(self, n: int, killers: set[int]) -> None:
        settings = ReadSettings("r", None, 100, 5.0, 0.1, 1.0, 1.0)
        super().__init__(_SimulatedSpark(), lambda r: None, settings)
        self.n, self.killers, self.failed_jobs = n, killers, 0

    def collect(self, batch_id: int, plans: list[ReadPlan]) -> list[ReadResult]:
        out = []
        for plan in plans:
            assert plan.position is not None
            after = plan.position.after
            start = after.sequence if after is not None else 0
            keys = list(range(start + 1, min(start + plan.limit, self.n) + 1))
            if self.killers & set(keys):
                self.failed_jobs += 1
                raise RuntimeError("Python worker exited unexpectedly (crashed)")
            res = ReadResult(plan.task, plan.stream, plan.shard_id, seqs=[str(k) for k in keys])
            res.subs, res.ok = [0] * len(keys), bytearray([1] * len(keys))
            last = keys[-1] if keys else start
            res.end = ReadEnd(_after(last), taken=len(keys), caught_up=last >= self.n)
            out.append(res)
        return out


reads = st.lists(st.lists(st.booleans(), min_size=0, max_size=12), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(reads=reads, seed=st.integers(0, 2**16))
def test_tracking_only_the_sparse_marks_gives_the_checkpoint_of_every_key(
    reads: list[list[bool]], seed: int
) -> None:
    dense: InflightRecordTracker[int] = InflightRecordTracker(100)
    sparse: InflightRecordTracker[int] = InflightRecordTracker(100)
    pending: list[SequenceKey] = []
    seq = 0
    for oks in reads:
        keys = [SequenceKey(seq + i + 1, 0) for i in range(len(oks))]
        seq += len(oks)
        for k, ok in zip(keys, oks, strict=True):
            dense.emitted(k, 0)
            if ok:
                dense.ack(k)
        ok_bytes = bytearray(int(o) for o in oks)
        failed = [i for i, o in enumerate(oks) if not o]
        for i, is_failed in sparse_marks(ok_bytes, failed):
            sparse.emitted(keys[i], 0)
            if not is_failed:
                sparse.ack(keys[i])
        for i in failed:
            dense.fail(keys[i])
            sparse.fail(keys[i])
            pending.append(keys[i])
        assert sparse.checkpoint == dense.checkpoint
    random.Random(seed).shuffle(pending)
    for k in pending:
        dense.ack(k)
        sparse.ack(k)
        assert sparse.checkpoint == dense.checkpoint
    assert sparse.in_flight == dense.in_flight == 0


def test_sparse_marks_track_failures_their_neighbours_and_the_end() -> None:
    ok = bytearray([1, 1, 0, 1, 0, 0, 1, 1])
    assert sparse_marks(ok, [2, 4, 5]) == [
        (1, False),
        (2, True),
        (3, False),
        (4, True),
        (5, True),
        (7, False),
    ]
    assert sparse_marks(bytearray([1] * 5), []) == [(4, False)]
    assert sparse_marks(bytearray(), []) == []


def test_a_read_window_forgets_only_the_runs_a_save_covers() -> None:
    w = ReplayWindow()
    w.add_run(SequenceKey(10, 0), 10)
    w.add_run(SequenceKey(20, 0), 10)
    w.trim(SequenceKey(15, 0))  # cuts the second run: it stays whole
    assert w.size == 10 and w.last == SequenceKey(20, 0)
    assert w.covered(SequenceKey(19, 0)) == 0 and w.covered(SequenceKey(20, 0)) == 10
    w.trim(SequenceKey(20, 0))
    assert w.size == 0 and w.last is None


def test_a_window_with_keys_forgets_exactly_what_a_save_covers() -> None:
    w = ReplayWindow()
    w.add_run(SequenceKey(3, 0), 3)
    w.add_keys([SequenceKey(5, 0), SequenceKey(5, 1)])
    w.add_keys([SequenceKey(7, 0)])  # joins the run with keys
    assert w.size == 6 and w.last == SequenceKey(7, 0)
    assert w.covered(SequenceKey(5, 0)) == 4
    w.trim(SequenceKey(5, 0))  # the run without keys goes whole, one key of the next
    assert w.size == 2 and w.covered(SequenceKey(7, 0)) == 2
    w.trim(SequenceKey(9, 0))
    assert w.size == 0


def _rec(seq: int) -> Record:
    return Record("s", "shard-1", str(seq), 0, "pk", b"x", None, SequenceKey(seq, 0))


POS = GetterPosition(None, SequenceKey(1, 0), True, InitialPosition.TRIM_HORIZON, None)


def test_a_row_space_numbers_plans_by_their_limits_then_renumbers_the_rows_read() -> None:
    import pyarrow as pa

    pos = GetterPosition(None, None, True, InitialPosition.TRIM_HORIZON, None)
    retry = ReadPlan(7, "s", "b", None, retries=(_rec(1), _rec(2)))
    plans = [ReadPlan(5, "s", "a", pos, limit=10), retry, ReadPlan(9, "s", "c", pos, limit=4)]
    space = RowSpace(plans)
    assert space.bases == {5: 0, 7: 10, 9: 12}
    results = [ReadResult(9, "s", "c", ok=bytearray(3)), ReadResult(5, "s", "a", ok=bytearray(2))]
    results.append(ReadResult(7, "s", "b", ok=bytearray(2)))
    # Plan 5 read 2 of 10, the retries 2, plan 9 read 3 of 4 (results in any order).
    table = pa.table({"_row": pa.array([12, 1, None, 11, 14, 0, 10, 13], pa.int64())})
    dense, n = space.dense(table, results)
    assert n == 7
    assert dense.column("_row").to_pylist() == [4, 1, None, 3, 6, 0, 2, 5]
    ordered, firsts = space.order(results)
    assert [r.task for r in ordered] == [5, 7, 9] and firsts == {5: 0, 7: 2, 9: 4}
    with pytest.raises(ValueError, match="row 2, which no read produced"):
        space.dense(pa.table({"_row": pa.array([2], pa.int64())}), results)


def test_assemble_drops_a_read_whose_statuses_came_from_mixed_attempts() -> None:
    plan = ReadPlan(0, "s", "shard-1", POS, limit=10)
    end = ReadResult(0, "s", "shard-1", end=ReadEnd(POS))
    rows = [
        ("m", 0, end, 3),
        ("s", 0, 0, "5", 0, None, None, 0),
        ("s", 0, 2, "7", 0, None, None, 0),
    ]
    assert assemble([plan], rows) == []  # record 1 missing: read again, nothing tracked


def test_assemble_fills_a_complete_read_in_record_order() -> None:
    plan = ReadPlan(0, "s", "shard-1", POS, limit=10)
    end = ReadResult(0, "s", "shard-1", end=ReadEnd(POS))
    bad = _rec(6)
    rows = [
        ("s", 0, 1, "6", 0, "ValueError: no", bad, 2),
        ("m", 0, end, 3),
        ("s", 0, 2, "7", 0, None, None, 1),  # ok on its fast retry
        ("s", 0, 0, "5", 0, None, None, 0),
    ]
    (res,) = assemble([plan], rows)
    assert res.seqs == ["5", "6", "7"] and res.ok == bytearray([1, 0, 1])
    assert res.failed == {1: bad} and res.errors == {1: "ValueError: no"}
    assert res.retried == 3  # every fast retry, also the one that ended ok


def test_assemble_fails_a_retry_whose_status_was_lost() -> None:
    retries = (_rec(3), _rec(4))
    plan = ReadPlan(0, "s", "shard-1", None, retries=retries)
    rows = [("m", 0, ReadResult(0, "s", "shard-1"), 2), ("s", 0, 0, "3", 0, None, None, 0)]
    (res,) = assemble([plan], rows)
    assert res.ok == bytearray([1, 0]) and res.errors == {1: LOST} and res.failed == {1: retries[1]}


def test_a_failed_job_runs_again_task_by_task_then_halved_down_to_one_record() -> None:
    a = ReadPlan(0, "s", "a", POS, limit=8)
    b = ReadPlan(1, "s", "b", None, retries=(_rec(1), _rec(2), _rec(3)))
    assert _halves([a, b]) == [[a], [b]]
    assert [p[0].limit for p in _halves([a])] == [4]
    assert [len(p[0].retries) for p in _halves([b])] == [1, 2]
    assert _halves([ReadPlan(0, "s", "a", POS, limit=1)]) == []
    assert _halves([ReadPlan(0, "s", "b", None, retries=(_rec(1),))]) == []


def _committer() -> Committer:
    cfg = spout_config()
    committer = Committer(cfg, InMemoryMetrics())
    committer.store = MemoryCheckpointStore("job")
    return committer


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=10),
    max_in_flight=st.integers(1, 6),
    late=st.sets(st.integers(0, 40)),
    by_runs=st.booleans(),
)
def test_a_window_cut_inside_an_aggregate_reads_on_and_keeps_its_bound(
    sizes: list[int], max_in_flight: int, late: set[int], by_runs: bool
) -> None:
    """Kinesis records of 1-5 user records (KPL aggregates), read as far as the replay
    window lets (cut inside aggregates), acked at once or one step late. The shard
    never stalls, the window exceeds ``max_in_flight`` by at most the one record an
    aggregate's head waits on, and no checkpoint is saved at ``(seq, 0)`` of an
    aggregate. ``by_runs``: the window kept as runs (executor reads) instead of keys."""
    keys = [SequenceKey(seq, sub) for seq, n in enumerate(sizes, 1) for sub in range(n)]
    multi = {seq for seq, n in enumerate(sizes, 1) if n > 1}
    part = ShardPartition("s", "shard", None)
    part.tracker = InflightRecordTracker(3)
    committer = _committer()
    read = 0
    waiting: list[SequenceKey] = []
    for step in range(4 * len(keys) + 4):
        room, size = part.room(max_in_flight), part.window.size
        assert size <= max_in_flight or (size == max_in_flight + 1 and room <= 0)
        taken = keys[read : read + max(room, 0)]
        read += len(taken)
        for k in taken:
            if k.sequence in multi:
                part.aggregates[k.sequence] = None
        if by_runs and taken:
            for k in taken:
                part.tracker.emitted(k, None, 0.0)
            part.window.add_run(taken[-1], len(taken))
        elif taken:
            part.emit([_key_rec(k) for k in taken], 0.0)
        for k in waiting:
            part.tracker.ack(k)
        waiting = [k for i, k in enumerate(taken, read - len(taken)) if i in late]
        for k in taken:
            if k not in waiting:
                part.tracker.ack(k)
        assert committer.save(part, float(step))
        if part.saved is not None:
            assert part.saved.sub_sequence or part.saved.sequence not in multi
        if read == len(keys) and not waiting:
            break
    assert read == len(keys), f"stalled after {read} of {len(keys)} records"
    assert part.saved == keys[-1]


def _key_rec(key: SequenceKey) -> Record:
    return Record("s", "shard", str(key.sequence), key.sub_sequence, "pk", b"", None, key)


def test_the_retry_of_a_record_a_read_found_failing_alone_is_known_poison() -> None:
    """A read task of one record fails alone (the job ran a moment ago: poison); its
    shard's fetch plan reads that record and fails it; its retry then fails alone too,
    with nothing else run in between: still poison, not a systematic failure."""
    jobs = ReadJobs(None, lambda r: None, ReadSettings("us-east-1", None, 100, 5, 0.1, 1, 1))
    jobs.healthy = True
    read = ReadIsolation(splits_left=4, alone=[(ReadPlan(1, "s", "shard-1", POS, limit=1), "died")])
    jobs.judge(1, read)
    jobs.remember_poison([_rec(2).stream_message_id])  # what the fetch read and failed
    retry = ReadPlan(2, "s", "shard-1", None, retries=(_rec(2),))
    jobs.judge(2, ReadIsolation(splits_left=4, alone=[(retry, "died")]))
    with pytest.raises(BatchFailedError):  # a record never seen failing alone: systematic
        other = ReadPlan(3, "s", "shard-1", None, retries=(_rec(3),))
        jobs.judge(3, ReadIsolation(splits_left=4, alone=[(other, "died")], exhausted=True))


class _Context:
    defaultParallelism = 2


class _Spark:
    sparkContext = _Context()


@pytest.mark.parametrize(
    ("plans", "per_task", "efo", "tasks"),
    [
        (0, 0, False, 1),
        (1, 0, False, 1),
        (5, 0, False, 2),  # one task per core
        (128, 0, False, 2),
        (2, 0, False, 2),
        (12, 4, False, 3),
        (13, 4, False, 4),
        (3, 10, False, 1),
        (6, 0, True, 6),  # enhanced fan-out: a task per shard
        (6, 4, True, 6),
    ],
)
def test_plans_are_grouped_into_tasks(plans: int, per_task: int, efo: bool, tasks: int) -> None:
    read = ReadSettings("us-east-1", None, 100, 5.0, 0.1, 1.0, 1.0)
    if efo:
        read = dataclasses.replace(read, streams=(StreamTarget("s", None, "arn:consumer"),))
    jobs = ReadJobs(_Spark(), lambda r: None, read, shards_per_task=per_task)
    assert jobs.tasks_for(plans) == tasks


@settings(max_examples=300, deadline=None)
@given(n=st.integers(2, 400), limit=st.integers(2, 400), at=st.floats(0, 1))
def test_a_record_that_fails_every_task_is_found_in_log2_of_the_limit_failed_jobs(
    n: int, limit: int, at: float
) -> None:
    """Fails on the version that ran only the first half again (the rest waited for the
    next micro-batch, which failed on the whole limit again): the records before the
    killer are all read in this micro-batch, once, in order, and the killer is found
    alone after at most 1 + ceil(log2 limit) failed jobs."""
    killer = 1 + int(at * (min(n, limit) - 1))
    jobs = SimulatedShardJobs(n, {killer})
    results, iso = jobs.run(1, [ReadPlan(1, "s", "shard-1", _START, limit=limit)])
    assert [int(s) for r in results for s in r.seqs] == list(range(1, killer))
    assert [(p.position, p.limit) for p, _ in iso.alone] == [
        (dataclasses.replace(_START, after=SequenceKey(killer - 1, 0) if killer > 1 else None), 1)
    ]
    assert jobs.failed_jobs <= 1 + math.ceil(math.log2(limit))
    assert not iso.exhausted and not iso.abandoned


def test_a_half_that_read_nothing_is_not_followed_by_the_same_plan_again() -> None:
    """A half whose calls were all throttled reads nothing and is not caught up: its
    "rest" would be the plan that just failed (one more failed job each time, until the
    split budget stops the job); the search ends the micro-batch there instead."""
    plan = ReadPlan(1, "s", "shard-1", _START, limit=8)
    throttled = ReadResult(1, "s", "shard-1", end=ReadEnd(_START, errors=[]))
    assert _rest([plan], [throttled]) is None
    half = ReadResult(1, "s", "shard-1", seqs=["1", "2", "3", "4"], subs=[0] * 4, ok=bytearray(4))
    half.end = ReadEnd(dataclasses.replace(_START, after=SequenceKey(4, 0)), taken=4)
    assert _rest([plan], [half]) == dataclasses.replace(plan, position=half.end.position, limit=4)


def test_reader_id_names_the_process_without_trying_an_import_per_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every plan of a read task names its reader (two or three calls per plan). The old
    code tried ``from pyspark import SparkEnv`` on each call, an import that always fails
    (SparkEnv is a JVM class): 76 µs a call, about a tenth of an idle poll's CPU."""
    import builtins
    import os
    import socket

    from kinesis_spout.processinfo import reader_id

    tried: list[str] = []
    real = builtins.__import__

    def spy(name: str, *args: object, **kwargs: object) -> object:
        tried.append(name)
        return real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", spy)
    assert reader_id() == f"{socket.gethostname()}:{os.getpid()}"
    assert tried == []
