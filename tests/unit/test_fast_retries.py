"""Fast retries, max_record_age and dead-letter reasons: the pure logic.

The tracker counts deliveries made by the caller; the fast-retry policy runs a
failing function again at once within its limits; the spout gives up records
that are too old as ``expired`` and writes a call's dead letters together.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_spout import Rig, S

from kinesis_spout.core.age import RecordAge, too_old
from kinesis_spout.core.retrypolicy import RetryPolicy
from kinesis_spout.deadletter import (
    DeadLetter,
    FilteredDeadLetterSink,
    JsonlDeadLetterSink,
    read_dead_letters,
)
from kinesis_spout.records import Record
from kinesis_spout.spark import InputRecord, input_record
from kinesis_spout.spark.process.fastretry import FastRetry
from tracker import (
    Backoff,
    ExponentialBackoff,
    FailAction,
    InflightRecordTracker,
    NoBackoff,
    SequenceKey,
)


def k(n: int) -> SequenceKey:
    return SequenceKey(n, 0)


# ------------------------------------------------------------------ tracker


def test_deliveries_made_by_the_caller_count_towards_the_retry_limit() -> None:
    t: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=3)
    assert t.emitted(k(1), "a") and t.emitted(k(2), "b")
    out = t.fail(k(1), 0.0, "boom", deliveries=4)
    assert (out.action, out.attempts, out.record) == (FailAction.GIVEN_UP, 4, "a")
    out = t.fail(k(2), 0.0, "boom", deliveries=2)
    assert out.action is FailAction.RETRY
    item = t.next_retry(0.0)
    assert item is not None and (item.key, item.attempt) == (k(2), 3)
    assert t.checkpoint is None  # nothing done yet: 1 is given up but not confirmed
    assert t.dead_lettered(k(1))
    assert t.checkpoint == k(1)


def test_a_lower_delivery_count_never_lowers_the_tracked_one() -> None:
    t: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=2)
    t.emitted(k(1), "a")
    t.fail(k(1), 0.0, "x", deliveries=2)
    item = t.next_retry(0.0)
    assert item is not None and item.attempt == 3
    t.emitted(k(1), "a")
    out = t.fail(k(1), 0.0, "x", deliveries=1)  # stale count: the tracked 3 wins
    assert (out.action, out.attempts) == (FailAction.GIVEN_UP, 3)


def test_give_up_gives_up_on_the_first_failure() -> None:
    t: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=5)
    t.emitted(k(7), "old")
    out = t.fail(k(7), 0.0, "late", give_up=True)
    assert (out.action, out.attempts, out.error) == (FailAction.GIVEN_UP, 1, "late")
    assert t.record_of(k(7)) == "old" and t.record_of(k(8)) is None


# ------------------------------------------------------------------ the policy


def rec(attempt: int = 1, age: float | None = None, data: bytes = b"x") -> InputRecord:
    arrival = None if age is None else datetime.now(UTC) - timedelta(seconds=age)
    return input_record("s", "shardId-0", "5", 0, "pk", data, arrival, attempt)


class Flaky:
    """Fails its first ``n`` calls."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen: list[int] = []

    def __call__(self, r: InputRecord) -> None:
        self.seen.append(r.attempt)
        if len(self.seen) <= self.n:
            raise ValueError(f"try {len(self.seen)}")


def fmt(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def test_a_flaky_record_passes_on_a_fast_retry_with_backoff_waited_out() -> None:
    sleeps: list[float] = []
    policy = FastRetry(
        RetryPolicy(3, ExponentialBackoff(0.1, cap=1.0)), max_delay=0.5, enabled=True
    )
    fn = Flaky(2)
    assert policy.call(fn, rec(), fmt, sleeps.append) == (None, 3)
    assert fn.seen == [1, 2, 3] and sleeps == [0.1, 0.2]


def test_a_poison_record_uses_every_retry_then_reports_its_last_delivery() -> None:
    policy = FastRetry(RetryPolicy(3), enabled=True)
    fn = Flaky(100)
    assert policy.call(fn, rec(), fmt) == ("ValueError: try 4", 4)
    fn2 = Flaky(100)  # a record already retried once by a later batch: fewer left
    assert policy.call(fn2, rec(attempt=3), fmt)[1] == 4 and fn2.seen == [3, 4]


@pytest.mark.parametrize(
    ("policy", "age", "tries"),
    [
        (FastRetry(RetryPolicy(3), enabled=False), None, 1),
        (FastRetry(RetryPolicy(0), enabled=True), None, 1),
        # the third retry would wait 0.4 s > max_delay 0.3: left to a later batch
        (FastRetry(RetryPolicy(5, ExponentialBackoff(0.1)), max_delay=0.3, enabled=True), None, 3),
        (FastRetry(RetryPolicy(3, max_age=60.0), enabled=True), 120.0, 1),
        (FastRetry(RetryPolicy(3, max_age=60.0), enabled=True), 1.0, 4),
    ],
)
def test_fast_retries_stop_where_the_limits_say(
    policy: FastRetry, age: float | None, tries: int
) -> None:
    fn = Flaky(100)
    # The record is made here, not at collection: its age counts from now.
    error, attempt = policy.call(fn, rec(age=age), fmt, lambda s: None)
    assert error is not None and len(fn.seen) == tries and attempt == tries


@pytest.mark.parametrize(
    ("values", "backoff"),
    [
        ({}, NoBackoff()),
        ({"retry_backoff": 0.25, "retry_backoff_max": 2.0}, ExponentialBackoff(0.25, cap=2.0)),
    ],
)
def test_fast_retries_take_the_retry_policy_of_the_spouts_trackers(
    values: dict[str, Any], backoff: Backoff
) -> None:
    r = Rig(retry_limit=4, max_record_age=30.0, fast_retry_max_delay=0.75, **values)
    policy = r.spout._retry  # noqa: SLF001
    assert policy == RetryPolicy(4, backoff, 30.0) == RetryPolicy.of(r.spout.config)
    fast = FastRetry.of(r.spout.config)
    assert fast == FastRetry(policy, max_delay=0.75, enabled=True)
    assert pickle.loads(pickle.dumps(fast)) == fast  # shipped to the executors
    r.kinesis.put_many(S[0], 2)
    r.open()
    a, b = r.spout.next_batch(2)
    tracker = r.spout.streams.find(None, a.shard_id).tracker  # type: ignore[union-attr]
    assert tracker is not None
    out = tracker.fail(a.key, 100.0, "boom", deliveries=4)  # the tracker's own rules
    assert out.action is FailAction.RETRY and not policy.spent(4)
    assert out.retry_at == 100.0 + fast.delay(4)
    out = tracker.fail(b.key, 100.0, "boom", deliveries=5)
    assert out.action is FailAction.GIVEN_UP and policy.spent(5)


def test_a_base_exception_is_not_retried() -> None:
    def die(r: InputRecord) -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        FastRetry(RetryPolicy(3), enabled=True).call(die, rec(), fmt)


def test_record_age() -> None:
    now = datetime(2026, 1, 1, 12, tzinfo=UTC).timestamp()
    assert too_old(datetime(2026, 1, 1, 11, tzinfo=UTC), 60.0, now)
    assert not too_old(datetime(2026, 1, 1, 11, 59, 30, tzinfo=UTC), 60.0, now)
    assert not too_old(None, 60.0, now)
    assert not RecordAge(None).expired(None) and not RecordAge(None)


# ------------------------------------------------------------------ the spout


class Letters:
    """A dead-letter sink keeping each write_many call."""

    def __init__(self) -> None:
        self.calls: list[list[DeadLetter]] = []

    def write_many(self, letters: Sequence[DeadLetter]) -> None:
        self.calls.append(list(letters))

    def close(self) -> None:
        pass


def rig(**cfg: Any) -> tuple[Rig, Letters]:
    r = Rig(**cfg)
    sink = Letters()
    r.spout.acks.sink = sink  # noqa: SLF001
    return r, sink


def test_a_record_older_than_max_record_age_is_dead_lettered_as_expired() -> None:
    r, sink = rig(retry_limit=5, max_record_age=3600.0)
    r.kinesis.put_many(S[0], 2)  # the fake's arrival time is 2026-01-01: long ago
    r.open()
    a, b = r.spout.next_batch(2)
    r.spout.fail(a, "boom")
    r.spout.ack(b)
    assert [(d.record.key, d.reason, d.attempts) for c in sink.calls for d in c] == [
        (a.key, "expired", 1)
    ]
    st = r.spout.stats()
    assert (st.expired, st.dead_lettered) == (1, 1)
    r.spout.checkpoint(force=True)
    cp = r.cp(S[0])
    assert cp is not None and cp.key == b.key  # the expired record is done


def test_young_records_are_retried_as_usual_under_max_record_age() -> None:
    r, sink = rig(retry_limit=1, max_record_age=10 * 365 * 86400.0)
    r.kinesis.put_many(S[0], 1)
    r.open()
    first = r.spout.next_batch(1)[0]
    r.spout.fail(first, "boom")
    assert not sink.calls and r.spout.next_batch(1)[0].attempt == 2


def test_a_record_passed_back_with_its_fast_retries_is_given_up_at_once() -> None:
    r, sink = rig(retry_limit=3)
    r.kinesis.put_many(S[0], 4)
    r.open()
    batch = r.spout.next_batch(4)
    last = [dataclasses.replace(x, attempt=4) for x in batch[:3]]
    r.spout.fail_many([(x, "poison") for x in last])
    r.spout.ack(batch[3])
    assert len(sink.calls) == 1  # the call's dead letters in one write
    assert [(d.record.key, d.attempts, d.reason) for d in sink.calls[0]] == [
        (x.key, 4, "exhausted") for x in batch[:3]
    ]
    assert r.spout.next_batch(10) == []  # nothing left to retry
    r.spout.checkpoint(force=True)
    cp = r.cp(S[0])
    assert cp is not None and cp.key == batch[3].key


# ------------------------------------------------------------------ sinks


def record(seq: int, shard: str = "shardId-000000000000") -> Record:
    return Record("st", shard, str(seq), 0, "pk", f"payload {seq}".encode(), None, k(seq))


def test_jsonl_write_many_appends_each_record_once(tmp_path: Any) -> None:
    sink = JsonlDeadLetterSink(tmp_path, "job")
    letters = [DeadLetter(record(i), "err", 4) for i in (1, 2, 2, 3)]
    sink.write_many(letters)
    again = JsonlDeadLetterSink(tmp_path, "job")  # a restart replays 3 and adds 4
    again.write_many([DeadLetter(record(3), "err", 4), DeadLetter(record(4), "old", 1, "expired")])
    entries = read_dead_letters(tmp_path)
    assert [(e["sequence_number"], e["reason"]) for e in entries] == [
        ("1", "exhausted"),
        ("2", "exhausted"),
        ("3", "exhausted"),
        ("4", "expired"),
    ]
    assert (sink.written, again.written) == (3, 1)


def test_dead_letter_on_writes_the_listed_reasons_and_logs_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inner = Letters()
    sink = FilteredDeadLetterSink(inner, ["exhausted"])
    with caplog.at_level(logging.ERROR):
        sink.write_many(
            [DeadLetter(record(1), "e", 4), DeadLetter(record(2), "too old", 1, "expired")]
        )
    assert [d.record.sequence_number for c in inner.calls for d in c] == ["1"]
    assert "gave up on st/shardId-000000000000:2 (expired)" in caplog.text


# ------------------------------------------------------------------ follow-up jobs


def _result(task: int, shard: str, statuses: list[bool], first: int) -> Any:
    """A transform's result of ``len(statuses)`` records of ``shard`` (sequence numbers
    from ``first``), the failed ones with their payloads."""
    from kinesis_spout.spark.plan import ReadPlan, ReadResult

    res = ReadResult.for_plan(ReadPlan(task, "s", shard, None))
    for j, ok in enumerate(statuses):
        rec = dataclasses.replace(record(first + j), shard_id=shard)
        res.seqs.append(rec.sequence_number)
        res.subs.append(0)
        res.ok.append(1 if ok else 0)
        if not ok:
            res.failed[j], res.errors[j] = rec, f"e{first + j}"
    return res


def test_a_follow_up_job_re_runs_the_failed_records_until_they_pass_or_run_out() -> None:
    from kinesis_spout.spark.plan import ReadPlan, ReadResult
    from kinesis_spout.spark.read.followup import follow_up

    # record 1 (shard a) passes on its second try, record 4 (shard b) never does
    first = _result(1, "a", [True, False, True], 0)
    second = _result(2, "b", [True, False, True], 3)
    runs: list[list[tuple[str, str, int]]] = []

    def run(plans: list[ReadPlan]) -> list[ReadResult]:
        runs.append([(p.shard_id, r.sequence_number, r.attempt) for p in plans for r in p.retries])
        out = []
        for p in plans:
            res = ReadResult.for_plan(p)
            for j, r in enumerate(p.retries):
                res.ok.append(1 if r.sequence_number == "1" else 0)
                if r.sequence_number != "1":
                    res.errors[j] = "again"
            out.append(res)
        return out

    policy = FastRetry(RetryPolicy(3), enabled=True)
    extra = follow_up([first, second], run, policy)
    assert runs == [[("a", "1", 2), ("b", "4", 2)], [("b", "4", 3)], [("b", "4", 4)]]
    assert extra == 4
    assert (bytes(first.ok), first.failed, first.errors, first.retried) == (
        b"\x01\x01\x01",
        {},
        {},
        1,
    )
    assert bytes(second.ok) == b"\x01\x00\x01" and second.errors == {1: "again"}
    assert (second.failed[1].attempt, second.retried) == (4, 3)


def test_a_follow_up_job_that_fails_leaves_the_records_as_they_were() -> None:
    from kinesis_spout.spark.plan import ReadPlan, ReadResult
    from kinesis_spout.spark.read.followup import follow_up

    out = _result(1, "a", [False, True], 0)

    def run(plans: list[ReadPlan]) -> list[ReadResult]:
        raise RuntimeError("executor lost")

    policy = FastRetry(RetryPolicy(3), enabled=True)
    assert follow_up([out], run, policy) == 0
    assert (bytes(out.ok), out.errors, out.failed[0].attempt) == (b"\x00\x01", {0: "e0"}, 1)
