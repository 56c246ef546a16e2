"""The driver loop against an in-memory spout and a Spark-free runner.

``FakeSpout`` has KinesisSpout's API (retries first, round-robin, retry limit
then dead letter); ``LocalRunner`` runs the same executor functions the
Spark runner ships (``run_record_function``, ``run_emit``) on the Arrow
table directly. Clock and sleep are fake: no test waits.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from kinesis_spout.config import SpoutConfig
from kinesis_spout.records import Record
from kinesis_spout.spark.driver import BatchFailedError, BatchReport, SparkDriver
from kinesis_spout.spark.process.arrow import ROOT, ROW, statuses_from_arrow
from kinesis_spout.spark.process.contract import ProcessingContractError
from kinesis_spout.spark.process.fanout import ID, derived_rows, run_emit
from kinesis_spout.spark.process.ledger import SinkStatuses
from kinesis_spout.spark.process.runner import BatchOutcome
from kinesis_spout.spark.processing import (
    FanOutProcessor,
    InputRecord,
    Processor,
    RecordProcessor,
    fan_out,
    per_record,
)
from tracker import SequenceKey

# --- fakes ------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class FakeSpout:
    """In-memory stand-in with KinesisSpout's API and retry/dead-letter rules."""

    def __init__(self, shards: dict[str, list[bytes]], retry_limit: int = 2) -> None:
        self.unread = {
            s: deque(
                Record("s", s, str(i + 1), 0, f"pk{i}", d, None, SequenceKey(i + 1))
                for i, d in enumerate(data)
            )
            for s, data in shards.items()
        }
        self.retry_limit = retry_limit
        self.retries: deque[Record] = deque()
        self.in_flight_ids: dict[str, Record] = {}
        self.acked: list[str] = []
        self.failures: list[tuple[str, str | None]] = []
        self.dead: list[tuple[str, str | None, int]] = []
        self.deliveries: list[tuple[str, int]] = []
        self.events: list[str] = []
        self.checkpoints: list[bool] = []
        self.opened = self.closed = False
        self.active = False

    def open(self) -> None:
        self.opened = True

    def activate(self) -> None:
        self.active = True

    def deactivate(self) -> None:
        self.active = False

    def next_batch(self, max_records: int) -> list[Record]:
        out: list[Record] = []
        while self.retries and len(out) < max_records:
            out.append(self.retries.popleft())
        progressed = True
        while len(out) < max_records and progressed:
            progressed = False
            for q in self.unread.values():
                if q and len(out) < max_records:
                    out.append(q.popleft())
                    progressed = True
        for r in out:
            self.in_flight_ids[r.message_id] = r
            self.deliveries.append((r.message_id, r.attempt))
        return out

    def poll_delay(self) -> float:
        return 0.25

    @staticmethod
    def _mid(ref: Any) -> str:
        return ref.message_id if isinstance(ref, Record) else str(ref)

    def ack_many(self, ids: Iterable[Any]) -> None:
        for ref in ids:
            mid = self._mid(ref)
            if self.in_flight_ids.pop(mid, None) is not None:
                self.acked.append(mid)
                self.events.append(f"ack {mid}")

    def fail_many(self, items: Iterable[tuple[Any, str | None]]) -> None:
        for ref, error in items:
            mid = self._mid(ref)
            rec = self.in_flight_ids.pop(mid, None)
            if rec is None:
                continue
            self.failures.append((mid, error))
            self.events.append(f"fail {mid}")
            if rec.attempt > self.retry_limit:
                self.dead.append((mid, error, rec.attempt))
            else:
                self.retries.append(replace(rec, attempt=rec.attempt + 1))

    def checkpoint(self, force: bool = False) -> None:
        self.checkpoints.append(force)

    def close(self) -> None:
        self.closed = True

    def stats(self) -> Any:
        return SimpleNamespace(
            dead_lettered=len(self.dead),
            in_flight=self.in_flight,
            millis_behind_latest={"a": 0, "b": 1500},
            checkpoint_age=1.5,
        )

    @property
    def in_flight(self) -> int:
        return len(self.in_flight_ids) + len(self.retries)

    @property
    def is_idle(self) -> bool:
        return not self.in_flight and not any(self.unread.values())


TableSink = Callable[[pa.Table], "list[tuple[bool, str | None]] | None"]


class LocalRunner:
    """Runs a processor's executor code on the Arrow table, without Spark.

    ``crash`` makes a (sub-)batch fail as a whole when it contains a record
    whose data matches (a worker dying on a poison record).
    """

    def __init__(
        self,
        processor: Processor,
        sinks: list[TableSink] | None = None,
        crash: Callable[[bytes], bool] | None = None,
        contract_error: bool = False,
    ) -> None:
        self.processor = processor
        self.sinks = sinks or []
        self.crash = crash
        self.contract_error = contract_error
        self.calls: list[tuple[int, int]] = []

    @property
    def needs_roots(self) -> bool:
        return isinstance(self.processor, FanOutProcessor)

    def run(self, batch_id: int, table: pa.Table, start: int, stop: int) -> BatchOutcome:
        self.calls.append((start, stop))
        part = table.slice(start, stop - start)
        if self.contract_error:
            raise ProcessingContractError("transform dropped _row")
        if self.crash and any(self.crash(d) for d in part.column("data").to_pylist()):
            raise RuntimeError("Python worker exited unexpectedly")
        p = self.processor
        if isinstance(p, RecordProcessor):
            from kinesis_spout.spark.processing import run_record_function

            back = pa.Table.from_batches(list(run_record_function(p.fn, part.to_batches())))
            return BatchOutcome(statuses_from_arrow(back, start, stop), part.drop_columns([ROW]))
        assert isinstance(p, FanOutProcessor)
        schema = pa.schema([pa.field("word", pa.string())])
        out = pa.Table.from_batches(
            list(run_emit(p.emit, schema, len(self.sinks), part.to_batches()))
        )
        status = out
        derived = derived_rows(out, ["word"])
        st = statuses_from_arrow(
            status.select([ROW, "_ok", "_error"]).rename_columns([ROW, "ok", "error"]), start, stop
        )
        vals = np.zeros(stop - start, dtype=np.int64)
        vals[status.column(ROW).to_numpy() - start] = status.column("_ack_val").to_numpy()
        results = []
        for i, sink in enumerate(self.sinks):
            res = sink(derived)
            roots = derived.column(ROOT).to_numpy()
            ids = derived.column(ID).to_numpy()
            if res is None:
                results.append(SinkStatuses.all_ok(i, f"sink{i}", roots, ids))
            else:
                ok = np.array([o for o, _ in res], dtype=bool)
                errors = {j: e or "x" for j, (o, e) in enumerate(res) if not o}
                results.append(SinkStatuses(i, f"sink{i}", roots, ids, ok, errors))
        return BatchOutcome(st, None, vals, results)


def make_driver(
    spout: FakeSpout,
    runner: Any,
    clock: FakeClock | None = None,
    reports: list[BatchReport] | None = None,
    pipeline: bool = False,
    **cfg: Any,
) -> SparkDriver:
    clock = clock or FakeClock()
    config = SpoutConfig(**{"batch_size": 10, "batch_max_wait": 1.0, "stop_when_idle": 2.0, **cfg})
    return SparkDriver(
        config,
        runner,
        spout,
        n_sinks=len(getattr(runner, "sinks", [])),
        clock=clock,
        sleep=clock.sleep,
        progress=(reports.append if reports is not None else None),
        pipeline=pipeline,
    )


def check(record: InputRecord) -> None:
    if record.data.startswith(b"poison"):
        raise ValueError(f"poison {record.data.decode()}")


def data(n: int, poison: Iterable[int] = ()) -> list[bytes]:
    bad = set(poison)
    return [(b"poison-%d" if i in bad else b"ok-%d") % i for i in range(n)]


# --- tests -------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", [False, True])
def test_every_record_is_acked_and_the_run_ends_with_a_forced_checkpoint(pipeline: bool) -> None:
    spout = FakeSpout({"a": data(13), "b": data(8)})
    reports: list[BatchReport] = []
    runner = LocalRunner(per_record(check))
    summary = make_driver(spout, runner, reports=reports, pipeline=pipeline).run()
    assert len(spout.acked) == 21 and spout.failures == []
    assert spout.opened and spout.closed and spout.checkpoints[-1] is True
    assert spout.checkpoints.count(False) >= 3  # once per loop, the spout decides when to write
    assert [r.records for r in reports] == [10, 10, 1]
    assert summary.records == 21 and summary.ok == 21 and summary.batches == 3
    assert summary.stopped_because == "idle for 2s"


@pytest.mark.parametrize("pipeline", [False, True])
def test_poison_records_are_delivered_retry_limit_plus_one_times_then_dead_lettered_once(
    pipeline: bool,
) -> None:
    spout = FakeSpout({"a": data(10, poison=[3]), "b": data(10, poison=[7])}, retry_limit=2)
    summary = make_driver(spout, LocalRunner(per_record(check)), pipeline=pipeline).run()
    attempts = [a for mid, a in spout.deliveries if mid in ("a:4", "b:8")]
    assert sorted(attempts) == [1, 1, 2, 2, 3, 3]
    assert sorted((m, e) for m, e, _ in spout.dead) == [
        ("a:4", "ValueError: poison poison-3"),
        ("b:8", "ValueError: poison poison-7"),
    ]
    assert len(spout.acked) == 18
    assert summary.retried == 4 and summary.dead_lettered == 2 and summary.failed == 6


def test_the_progress_line_has_every_figure() -> None:
    spout = FakeSpout({"a": data(4, poison=[0])})
    reports: list[BatchReport] = []
    make_driver(spout, LocalRunner(per_record(check)), reports=reports, max_batches=1).run()
    line = reports[0].line()
    for part in (
        "batch 0: 4 records",
        "ok 3",
        "failed 1",
        "retried 0",
        "dead-lettered 0",
        "in flight 1",
        "behind 1500 ms",
        "checkpoint age 1.5s",
        "records/s",
    ):
        assert part in line


def test_a_batch_waits_for_more_records_up_to_batch_max_wait() -> None:
    class Trickle(FakeSpout):
        def next_batch(self, max_records: int) -> list[Record]:
            return super().next_batch(min(max_records, 1))

    clock = FakeClock()
    spout = Trickle({"a": data(3)})
    reports: list[BatchReport] = []
    drv = make_driver(spout, LocalRunner(per_record(check)), clock, reports, batch_size=5)
    drv.run_once()
    # 3 records came one per call without waiting; then the driver waited
    # (poll_delay, capped at the deadline) until batch_max_wait was used up.
    assert reports[0].records == 3
    assert clock.now == pytest.approx(1.0)
    assert all(0 < s <= 0.5 for s in clock.slept)


def test_max_batches_stops_the_job() -> None:
    spout = FakeSpout({"a": data(100)})
    summary = make_driver(spout, LocalRunner(per_record(check)), max_batches=2).run()
    assert summary.batches == 2 and len(spout.acked) == 20
    assert summary.stopped_because == "max_batches=2 reached"


@pytest.mark.parametrize("pipeline", [False, True])
def test_a_stop_request_finishes_the_current_batch_then_checkpoints(pipeline: bool) -> None:
    spout = FakeSpout({"a": data(50)})
    holder: list[SparkDriver] = []

    def stop_during_batch(record: InputRecord) -> None:
        if record.data == b"ok-12":
            holder[0].request_stop("SIGTERM")

    drv = make_driver(spout, LocalRunner(per_record(stop_during_batch)), pipeline=pipeline)
    holder.append(drv)
    summary = drv.run()
    # the batch that saw the signal was finished and acked; with the pipeline
    # the batch already taken behind it may be finished too, never more
    assert spout.acked == [f"a:{i}" for i in range(1, len(spout.acked) + 1)]
    assert len(spout.acked) == 20 if not pipeline else len(spout.acked) in (20, 30)
    assert summary.stopped_because == "SIGTERM"
    assert spout.checkpoints[-1] is True and spout.closed


def test_a_worker_crashing_on_one_record_is_isolated_by_splitting_the_batch() -> None:
    spout = FakeSpout({"a": data(16, poison=[5])}, retry_limit=1)
    runner = LocalRunner(per_record(lambda r: None), crash=lambda d: d.startswith(b"poison"))
    reports: list[BatchReport] = []
    make_driver(spout, runner, reports=reports, batch_size=16).run()
    assert len(spout.acked) == 15
    assert spout.dead == [("a:6", "RuntimeError: Python worker exited unexpectedly", 2)]
    assert reports[0].splits == 4  # 16 -> 8 -> 4 -> 2 -> 1
    assert reports[0].ok == 15 and reports[0].failed == 1


def test_a_systematic_batch_failure_stops_the_job_without_losing_anything() -> None:
    spout = FakeSpout({"a": data(64)})
    runner = LocalRunner(per_record(lambda r: None), crash=lambda d: True)
    drv = make_driver(spout, runner, batch_size=64)
    with pytest.raises(BatchFailedError, match="failed as a whole"):
        drv.run()
    # nothing ran, so nothing was acked and nothing was failed: all stays in flight
    assert spout.acked == [] and spout.failures == []
    assert spout.checkpoints[-1] is True and spout.closed
    assert len(runner.calls) <= 2 * (4 * 6 + 4) + 1


def test_a_lone_crashing_retry_after_healthy_batches_is_still_poison() -> None:
    # The retry of a worker-crashing record comes back alone in its batch:
    # nothing else runs in that batch, but the batch before ran fine.
    spout = FakeSpout({"a": data(8, poison=[2])}, retry_limit=2)
    runner = LocalRunner(per_record(lambda r: None), crash=lambda d: d.startswith(b"poison"))
    make_driver(spout, runner, batch_size=8).run()
    assert len(spout.acked) == 7
    assert [(m, a) for m, _, a in spout.dead] == [("a:3", 3)]


def test_too_many_crashing_records_for_the_split_budget_stop_the_job() -> None:
    spout = FakeSpout({"a": data(64, poison=range(0, 64, 4))})
    runner = LocalRunner(per_record(lambda r: None), crash=lambda d: d.startswith(b"poison"))
    with pytest.raises(BatchFailedError, match="more records fail it as a whole"):
        make_driver(spout, runner, batch_size=64).run()
    assert spout.acked  # what ran was acked before stopping
    assert all(m.startswith("a:") for m, _ in spout.failures)
    assert spout.closed


def test_a_broken_processing_contract_stops_at_once() -> None:
    spout = FakeSpout({"a": data(8)})
    runner = LocalRunner(per_record(check), contract_error=True)
    with pytest.raises(ProcessingContractError):
        make_driver(spout, runner).run()
    assert len(runner.calls) == 1 and spout.failures == [] and spout.closed


def test_a_batch_failing_while_stopping_is_abandoned_not_failed() -> None:
    spout = FakeSpout({"a": data(8)})
    holder: list[SparkDriver] = []

    class Dying(LocalRunner):
        def run(self, batch_id: int, table: pa.Table, start: int, stop: int) -> BatchOutcome:
            holder[0].request_stop("SIGINT")
            raise RuntimeError("SparkContext was shut down")

    drv = make_driver(spout, Dying(per_record(check)))
    holder.append(drv)
    summary = drv.run()
    assert spout.acked == [] and spout.failures == []  # left in flight: replayed after a restart
    assert summary.stopped_because == "SIGINT" and spout.checkpoints[-1] is True


def test_rows_reach_the_row_sink_before_their_records_are_acked() -> None:
    spout = FakeSpout({"a": data(5, poison=[1])})

    class Sink:
        name = "recording"

        def write(self, batch_id: int, table: pa.Table) -> None:
            spout.events.append(f"sink {table.num_rows}")

        def close(self) -> None:
            spout.events.append("sink closed")

    drv = make_driver(spout, LocalRunner(per_record(check)), max_batches=1)
    drv.row_sink = Sink()
    drv.run()
    assert spout.events[0] == "sink 5"  # the runner hands over the batch; ok rows in real runs
    assert spout.events[1].startswith(("ack", "fail"))
    assert spout.events[-1] == "sink closed"


def split(record: InputRecord) -> list[str]:
    text = record.data.decode()
    if text.startswith("poison"):
        raise ValueError("unsplittable")
    return text.split("-")


def test_fan_out_acks_a_source_only_when_all_its_derived_records_are_written() -> None:
    spout = FakeSpout({"a": [b"x-y-z", b"u-boom", b"poison", b"w"]}, retry_limit=0)

    def writer(derived: pa.Table) -> list[tuple[bool, str | None]]:
        return [(w != "boom", "cannot write boom") for w in derived.column("word").to_pylist()]

    runner = LocalRunner(fan_out(split, "word string", [lambda df: None]), sinks=[writer])
    reports: list[BatchReport] = []
    make_driver(spout, runner, reports=reports).run()
    assert sorted(spout.acked) == ["a:1", "a:4"]
    assert sorted(spout.dead) == [
        ("a:2", "sink sink0: cannot write boom", 1),
        ("a:3", "ValueError: unsplittable", 1),
    ]
    assert reports[0].ok == 2 and reports[0].failed == 2 and reports[0].pending_trees == 0


def test_fan_out_trees_left_incomplete_time_out_and_fail_their_source() -> None:
    spout = FakeSpout({"a": [b"x-y", b"z"]}, retry_limit=0)

    def loses_y(derived: pa.Table) -> list[tuple[bool, str | None]]:
        # a sink that never reports "y" (say, an async writer that lost it)
        return [(True, None) for _ in derived.column("word").to_pylist()]

    class Losing(LocalRunner):
        def run(self, batch_id: int, table: pa.Table, start: int, stop: int) -> BatchOutcome:
            out = super().run(batch_id, table, start, stop)
            s = out.sinks[0]
            words = ["x", "y", "z"][: len(s.ids)]
            keep = np.array([w != "y" for w in words], dtype=bool)
            out.sinks[0] = SinkStatuses(0, "s", s.roots[keep], s.ids[keep], s.ok[keep])
            return out

    clock = FakeClock()
    runner = Losing(fan_out(split, "word string", [lambda df: None]), sinks=[loses_y])
    drv = make_driver(spout, runner, clock, message_timeout=5.0, stop_when_idle=1.0)
    drv.run()
    assert spout.acked == ["a:2"]
    assert len(spout.dead) == 1 and spout.dead[0][0] == "a:1"
    assert "not complete within message_timeout" in str(spout.dead[0][1])
    assert clock.now >= 5.0


def test_records_given_to_the_processing_keep_their_attempt() -> None:
    seen: list[tuple[str, int]] = []

    def flaky(record: InputRecord) -> None:
        seen.append((record.message_id, record.attempt))
        if record.attempt < 2:
            raise RuntimeError("first try fails")

    spout = FakeSpout({"a": data(2)})
    make_driver(spout, LocalRunner(RecordProcessor(flaky))).run()
    assert sorted(seen) == [("a:1", 1), ("a:1", 2), ("a:2", 1), ("a:2", 2)]
    assert sorted(spout.acked) == ["a:1", "a:2"]


def test_the_summary_rate_is_records_done_per_second_of_processing_time() -> None:
    # Hole 9: the rate counted retries as records and divided by the whole run,
    # idle waits included.  The clock moves 1 s per processed record and the run
    # ends after 2 idle seconds.
    class SlowCheck:
        def __init__(self, clock: FakeClock) -> None:
            self.clock = clock

        def __call__(self, record: InputRecord) -> None:
            self.clock.now += 1.0
            check(record)

    clock = FakeClock()
    spout = FakeSpout({"a": data(6, poison=[2])}, retry_limit=1)
    summary = make_driver(spout, LocalRunner(per_record(SlowCheck(clock))), clock=clock).run()
    assert (summary.ok, summary.dead_lettered, summary.retried) == (5, 1, 1)
    assert summary.records == 7  # six records, one of them delivered twice
    assert summary.seconds > summary.busy_seconds >= 7.0  # the idle wait is not processing
    assert summary.done_per_second == pytest.approx(6 / summary.busy_seconds)
    line = summary.line()
    assert "6 done (ok 5, dead-lettered 1)" in line and "retried 1" in line
    assert f"{summary.done_per_second:,.1f} records done/s of processing" in line
