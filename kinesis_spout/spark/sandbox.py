"""The per-record style's read task run in a child process, so that a record that kills
its process or hangs is found where it happened and failed alone.

A Python worker keeps one child (forked on first use, kept across tasks, forked again
after it died). The worker hands it each task's plans; the child reads and processes
them as any read task does (:func:`~kinesis_spout.spark.task.run_plans`) and tells the
worker, as it goes, each page's keys before it processes it (and, with a sink, its rows
in Arrow), each record that failed or was retried, each read's end; a few bytes of
shared memory (:class:`ProgressBoard`) say which record it is in and since when.

When the child dies, or a record's call runs past ``task_timeout``, the worker knows
the record in progress: a retry plan's is failed at once, a read ends just before it
and its shard is quarantined (its next plan fetches it and fails it). What was done
stands, what a retry plan had left runs in a new child: nothing that ran runs again, and
the Spark job does not fail. The worker writes the sink's rows.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import multiprocessing
import os
import pickle
import signal
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from typing import Any

import pyarrow as pa

from kinesis_spout.processinfo import reader_id
from kinesis_spout.records import GetterPosition, ReadEnd, Record
from kinesis_spout.spark.plan import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.process.arrow import format_error, records_to_arrow
from kinesis_spout.spark.process.fastretry import FastRetry
from kinesis_spout.spark.process.sinks import write_task_rows
from kinesis_spout.spark.process.styles import RecordFunction, run_records
from kinesis_spout.spark.task import Consume, run_plans
from kinesis_spout.spark.worker_heap import freeze_imports
from tracker import SequenceKey

log = logging.getLogger(__name__)

_BOARD = struct.Struct("<qqqd")
"""In a record (1) or between records (0), the plan, the record's index in the plan's
result (between records: how many of the plan are done), when its call started."""


class ProgressBoard:
    """Shared memory saying where the child is (see the module docstring)."""

    def __init__(self) -> None:
        self.mem = mmap.mmap(-1, _BOARD.size)  # anonymous: shared with a forked child

    def set(self, in_record: bool, plan: int, index: int) -> None:
        self.mem[:] = _BOARD.pack(in_record, plan, index, time.monotonic())

    def read(self) -> tuple[bool, int, int, float]:
        """``(in a record?, plan, index, since)``."""
        in_record, plan, index, since = _BOARD.unpack(self.mem[:])
        return bool(in_record), plan, index, since


class Journal:
    """The child's side: each record's call marked on the board, and what the board
    cannot say (pages, failures, ends) sent to the worker. ``run_plans`` calls it."""

    def __init__(self, conn: Connection, board: ProgressBoard, rows: bool) -> None:
        self.conn, self.board, self.rows = conn, board, rows

    def send(self, *msg: object) -> None:
        self.conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))

    def _page(self, plan: int, done: int, records: list[Record]) -> None:
        self.board.set(False, plan, done)
        seqs = [r.sequence_number for r in records]
        subs = [r.sub_sequence_number for r in records]
        rows = records_to_arrow(records).drop_columns(["_row"]) if self.rows else None
        self.send("page", plan, seqs, subs, rows)

    def consumer(self, plan: int, fn: RecordFunction, fast: FastRetry) -> Consume:
        """What processes plan ``plan``'s pages (or its retries)."""
        board, send = self.board, self.send
        done = 0

        def call(r: Record) -> object:
            board.set(True, plan, done)
            return fn(r)

        def report(r: Record, error: str | None, attempt: int) -> None:
            nonlocal done
            if error is not None:
                send("status", plan, done, error, attempt - r.attempt, replace(r, attempt=attempt))
            elif attempt != r.attempt:
                send("status", plan, done, None, attempt - r.attempt, None)
            done += 1
            board.set(False, plan, done)

        def consume(records: list[Record]) -> None:
            self._page(plan, done, records)
            run_records(call, records, fast, report)

        return consume

    def unprocessed(self, plan: int, error: str) -> Consume:
        """What fails a fetch plan's record with ``error``, unprocessed."""
        done = 0

        def consume(records: list[Record]) -> None:
            nonlocal done
            self._page(plan, done, records)
            for r in records:
                self.send("status", plan, done, error, 0, r)
                done += 1
            self.board.set(False, plan, done)

        return consume

    def ended(self, plan: int, end: ReadEnd | None) -> None:
        self.send("end", plan, end)


@dataclass(slots=True)
class _PlanRun:
    """One plan's result as the worker assembles it from the journal."""

    plan: ReadPlan
    res: ReadResult
    rows: list[pa.Table] = field(default_factory=list)
    """With a sink: each page's rows, in order."""
    ended: bool = False

    def page(self, seqs: list[str], subs: list[int], rows: pa.Table | None) -> None:
        res = self.res
        res.seqs += seqs
        res.subs += subs
        res.ok += b"\x01" * len(seqs)
        if rows is not None:
            self.rows.append(rows)

    def status(self, i: int, error: str | None, extra: int, record: Record | None) -> None:
        res = self.res
        res.retried += extra
        if error is not None:
            assert record is not None
            res.ok[i] = 0
            res.errors[i] = error
            res.failed[i] = record

    def cut(self, n: int) -> None:
        """Keep the first ``n`` records."""
        res = self.res
        del res.seqs[n:], res.subs[n:], res.ok[n:]
        for i in [i for i in res.failed if i >= n]:
            del res.failed[i], res.errors[i]

    def end_before(self, n: int, why: str | None) -> ReadEnd:
        """A read cut by a lost child after its first ``n`` records ends there. The next
        read goes on after the last one, inside its Kinesis record (a KPL aggregate)
        unless the next record that came starts another. If no record came after it, the
        read goes on inside it too, and it counts as a multi-record aggregate (no
        checkpoint is saved at its first sub-record): the read's limit may have cut the
        page there before the child died. A plain record is then read again and dropped.
        ``why``: the record in progress failed alone (the next read fetches it)."""
        res, pos = self.res, self.plan.position
        assert pos is not None
        res.poisoned = why
        seqs = [int(q) for q in res.seqs]
        aggregates = {q for q, s in zip(seqs, res.subs, strict=True) if s}
        whole = n < len(seqs) and seqs[n] != seqs[n - 1]
        self.cut(n)
        if not n:
            return ReadEnd(pos)
        last = SequenceKey(seqs[n - 1], res.subs[n - 1])
        if not whole:
            aggregates.add(last.sequence)
        return ReadEnd(
            GetterPosition(None, last, whole, pos.initial, pos.timestamp),
            taken=n,
            last=last,
            events=1,
            aggregates=tuple(sorted(a for a in aggregates if a <= last.sequence)),
        )

    def ok_rows(self) -> list[pa.Table]:
        """The rows of the records done ok."""
        out, at = [], 0
        for table in self.rows:
            ok = self.res.ok[at : at + table.num_rows]
            if ok:
                mask = pa.array([bool(x) for x in ok], pa.bool_())
                out.append(table.slice(0, len(ok)).filter(mask))
            at += table.num_rows
        return out


class Sandbox:
    """The worker's side: one child at a time (see the module docstring)."""

    def __init__(self) -> None:
        self.board = ProgressBoard()
        self._proc: Any = None
        self._conn: Connection | None = None
        self.lost = 0
        """Children lost (died or killed)."""

    def run(
        self, plans: list[ReadPlan], settings: ReadSettings, fn: RecordFunction, batch_id: int
    ) -> list[ReadResult]:
        """The task's results, the sink's rows written first."""
        from pyspark import cloudpickle

        child_settings = replace(settings, sink="none")
        rows = settings.sink != "none"
        out: list[ReadResult] = []
        tables: list[pa.Table] = []
        left = plans
        while left:
            executor = reader_id()
            runs = [_PlanRun(p, ReadResult.for_plan(p, executor, os.getpid())) for p in left]
            conn = self._start()
            self.board.set(False, -1, 0)  # not what a lost child left
            task = cloudpickle.dumps(  # type: ignore[no-untyped-call]
                (fn, child_settings, left, batch_id, rows, _task_context())
            )
            conn.send_bytes(task)
            why = self._follow(conn, runs, settings.record_timeout)
            if why is None:
                done, left = runs, []
            else:
                self._forget(runs)
                done, left = after_loss(runs, why, self.board.read())
            for run in done:
                tables += run.ok_rows()
                out.append(run.res)
        if tables:
            write_task_rows(settings.sink, batch_id, tables)
        return out

    def _start(self) -> Connection:
        if self._proc is not None and self._conn is not None and self._proc.is_alive():
            return self._conn
        self._forget([])
        ctx = multiprocessing.get_context("fork")
        mine, theirs = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_child, args=(theirs, self.board, os.getpid()), daemon=True)
        proc.start()
        theirs.close()
        self._proc, self._conn = proc, mine
        return mine

    def _follow(self, conn: Connection, runs: list[_PlanRun], timeout: float) -> str | None:
        """Take the child's journal until the task ends; None, or why the child is lost
        (it died, or a record's call ran past ``timeout`` seconds)."""
        proc = self._proc
        while True:
            ready = wait([conn, proc.sentinel], 0.2)
            if conn in ready:
                try:
                    msg = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    return _died(proc)
                if _take(runs, msg):
                    return None
            elif proc.sentinel in ready:
                return _died(proc)
            else:
                in_record, _, _, since = self.board.read()
                if timeout and in_record and time.monotonic() - since > timeout:
                    return f"the function ran past task_timeout ({timeout:g}s)"

    def _forget(self, runs: list[_PlanRun]) -> None:
        """Kill the child (if any) and take what it said before it died into ``runs``."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is not None:
            self.lost += int(bool(runs))
            if proc.is_alive():
                proc.kill()
            proc.join(10)
        if conn is not None:
            try:
                while conn.poll():
                    _take(runs, pickle.loads(conn.recv_bytes()))
            except (EOFError, OSError):
                pass
            conn.close()


def _died(proc: Any) -> str:
    proc.join(5)
    code = proc.exitcode
    how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return f"the Python process running it died ({how})"


def after_loss(
    runs: list[_PlanRun], why: str, board: tuple[bool, int, int, float]
) -> tuple[list[_PlanRun], list[ReadPlan]]:
    """What a lost child leaves: the plans done (the record in progress failed alone,
    each read ended after its last record done) and the plans to run in a new child (a
    retry plan's records not run yet, a read not started)."""
    in_record, at_plan, at_index, _ = board
    done: list[_PlanRun] = []
    again: list[ReadPlan] = []
    for i, run in enumerate(runs):
        if run.ended:
            done.append(run)
            continue
        poison = i == at_plan and in_record
        n = at_index if i == at_plan else len(run.res)
        plan = run.plan
        if not plan.is_retry:
            if n or poison:
                run.res.end = run.end_before(n, why if poison else None)
                done.append(run)
            else:
                again.append(plan)
            continue
        run.cut(n)
        if poison:
            record = plan.retries[n]
            run.page([record.sequence_number], [record.sub_sequence_number], None)
            run.status(n, why, 0, record)
            n += 1
        if n:
            done.append(run)
        if n < len(plan.retries):
            again.append(replace(plan, retries=plan.retries[n:]))
    if not done:
        raise RuntimeError(f"a read task lost its child process before any record: {why}")
    if in_record:
        run = runs[at_plan]
        log.warning("a record of %s/%s is failed alone: %s", *run.plan.key, why)
    return done, again


def _take(runs: list[_PlanRun], msg: tuple[Any, ...]) -> bool:
    """Apply one journal message; True at the task's end. A child's error is raised."""
    kind = msg[0]
    if kind == "all":
        return True
    if kind == "error":
        raise RuntimeError(msg[1])
    run = runs[msg[1]]
    if kind == "page":
        run.page(*msg[2:])
    elif kind == "status":
        run.status(*msg[2:])
    else:  # "end"
        run.res.end, run.ended = msg[2], True
    return False


def _child(conn: Connection, board: ProgressBoard, worker: int) -> None:
    """The child's loop: a task at a time, until the worker's end of the pipe closes."""
    _die_with_parent(worker)
    while True:
        try:
            fn, settings, plans, batch_id, rows, context = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            os._exit(0)
        _set_task_context(context)
        journal = Journal(conn, board, rows)
        try:
            run_plans(plans, settings, fn, batch_id, journal=journal)
        except Exception as exc:  # not a record's (those are statuses): the task fails
            journal.send("error", format_error(exc))
            continue
        journal.send("all")


def _task_context() -> dict[str, Any] | None:
    """The worker's Spark task context (partition, attempt, properties), for the child."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return None if ctx is None else dict(vars(ctx))


def _set_task_context(state: dict[str, Any] | None) -> None:
    """The child's ``TaskContext.get()`` is its worker's current task's."""
    from pyspark import TaskContext

    if state is None:
        TaskContext._setTaskContext(None)
    else:
        vars(TaskContext._getOrCreate()).update(state)


def _die_with_parent(worker: int) -> None:
    """The kernel kills this child when its worker dies (Linux; elsewhere the pipe's end
    stops it once it is between records); a worker gone before that was set: now."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != worker:
        os._exit(0)


_SANDBOX: Sandbox | None = None


def task_function(
    settings: ReadSettings, fn: RecordFunction, batch_id: int
) -> Callable[[Iterator[ReadPlan]], Iterator[ReadResult]]:
    """The ``mapPartitions`` body of the per-record style: the partition's plans run as
    one task in this Python worker's sandbox."""

    def run(plans: Iterator[ReadPlan]) -> Iterator[ReadResult]:
        freeze_imports()
        yield from worker_sandbox().run(list(plans), settings, fn, batch_id)

    return run


def worker_sandbox() -> Sandbox:
    """This Python worker's sandbox (a module function: a task's closure, shipped by
    value, finds it by reference and so shares one per worker)."""
    global _SANDBOX
    if _SANDBOX is None:
        _SANDBOX = Sandbox()
    return _SANDBOX
