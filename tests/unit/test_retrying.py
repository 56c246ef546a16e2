"""The one retry loop (:mod:`kinesis_spout.retrying`) and its users' retry rules."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from kit import FakeClock

from kinesis_spout.core.startup import STARTUP_ATTEMPTS, startup_call
from kinesis_spout.deadletter.cli import PUT_ATTEMPTS, DeadLetterCommandError, put_entries
from kinesis_spout.errors import (
    CredentialsError,
    EndpointUnreachableError,
    ExpiredIteratorError,
    ThrottledError,
    TransientKinesisError,
)
from kinesis_spout.retrying import is_retriable, never, retrying
from tracker import ExponentialBackoff, NoBackoff


class Failing:
    """Raises ``errors`` in turn, then returns ``result``."""

    def __init__(self, *errors: Exception, result: str = "ok") -> None:
        self.errors = list(errors)
        self.result = result
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.result


def no_wait(seconds: float) -> None:
    pytest.fail(f"waited {seconds}s")


def test_a_retriable_error_is_retried_with_the_backoff_delays() -> None:
    fn = Failing(ThrottledError("slow down"), TransientKinesisError("503"))
    slept: list[float] = []
    got = retrying(
        "x", fn, backoff=ExponentialBackoff(0.5, cap=3.0), attempts=5, sleep=slept.append
    )
    assert got == "ok" and fn.calls == 3 and slept == [0.5, 1.0]


def test_the_last_error_is_raised_when_the_attempts_are_spent() -> None:
    fn = Failing(*(ThrottledError(f"slow down {n}") for n in range(1, 10)))
    slept: list[float] = []
    with pytest.raises(ThrottledError, match="slow down 4"):
        retrying("x", fn, backoff=ExponentialBackoff(0.5, cap=3.0), attempts=4, sleep=slept.append)
    assert fn.calls == 4 and slept == [0.5, 1.0, 2.0]  # no wait after the last try


def test_one_attempt_is_one_call() -> None:
    fn = Failing(ThrottledError("slow down"))
    with pytest.raises(ThrottledError):
        retrying("x", fn, backoff=NoBackoff(), attempts=1, sleep=no_wait)
    assert fn.calls == 1


@pytest.mark.parametrize("error", [CredentialsError("no"), ValueError("bug"), KeyError("k")])
def test_a_non_retriable_error_is_raised_at_once(error: Exception) -> None:
    fn = Failing(error)
    with pytest.raises(type(error)):
        retrying("x", fn, backoff=NoBackoff(), attempts=5, sleep=no_wait)
    assert fn.calls == 1


def test_a_base_exception_is_never_caught() -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        retrying("x", interrupted, backoff=NoBackoff(), attempts=5, retriable=lambda e: True)


def test_the_predicate_decides_what_is_retried() -> None:
    assert is_retriable(ThrottledError("t")) and not is_retriable(CredentialsError("c"))
    assert not is_retriable(ValueError("v"))
    assert not never(ThrottledError("t"))

    def not_expired(e: Exception) -> bool:
        return is_retriable(e) and not isinstance(e, ExpiredIteratorError)

    fn = Failing(ExpiredIteratorError("expired"))
    with pytest.raises(ExpiredIteratorError):
        retrying("x", fn, backoff=NoBackoff(), attempts=5, retriable=not_expired)
    assert fn.calls == 1
    fn = Failing(ValueError("flaky"), ValueError("flaky"))
    got = retrying(
        "x",
        fn,
        backoff=NoBackoff(),
        attempts=5,
        sleep=lambda s: None,
        retriable=lambda e: isinstance(e, ValueError),
    )
    assert got == "ok" and fn.calls == 3


def test_a_deadline_ends_the_retries_and_cuts_the_last_wait() -> None:
    clock = FakeClock(sleep_cost=0.1)
    fn = Failing(*(ThrottledError(f"t{n}") for n in range(1, 100)))
    with pytest.raises(ThrottledError, match="t6"):
        retrying(
            "x",
            fn,
            backoff=ExponentialBackoff(0.25, cap=5.0),
            deadline=clock.now + 5,
            sleep=clock.sleep,
            clock=clock,
        )
    # waits 0.25, 0.5, 1, 2 (each 0.1 more), then only what is left of the 5 s
    assert clock.slept == pytest.approx([0.25, 0.5, 1.0, 2.0, 0.85])
    assert fn.calls == 6


def test_attempts_and_deadline_whichever_comes_first(fake_clock: FakeClock) -> None:
    fn = Failing(*(ThrottledError("t") for _ in range(100)))
    with pytest.raises(ThrottledError):
        retrying(
            "x",
            fn,
            backoff=ExponentialBackoff(1.0, factor=1.0),
            attempts=3,
            deadline=fake_clock.now + 60,
            sleep=fake_clock.sleep,
            clock=fake_clock,
        )
    assert fn.calls == 3 and fake_clock.slept == [1.0, 1.0]


def test_attempts_or_a_deadline_is_required() -> None:
    with pytest.raises(ValueError, match="attempts or a deadline"):
        retrying("x", lambda: 1, backoff=NoBackoff())
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        retrying("x", lambda: 1, backoff=NoBackoff(), attempts=0)


def test_again_retries_a_partial_result_and_keeps_the_last_one() -> None:
    answers = iter([[], [], ["a"]])
    slept: list[float] = []
    got = retrying(
        "x",
        lambda: next(answers),
        backoff=ExponentialBackoff(0.2),
        attempts=6,
        again=lambda r: None if r else "nothing yet",
        sleep=slept.append,
    )
    assert got == ["a"] and slept == [0.2, 0.4]

    calls: list[int] = []

    def nothing() -> list[str]:
        calls.append(1)
        return []

    got = retrying(
        "x", nothing, backoff=NoBackoff(), attempts=3, again=lambda r: "empty", sleep=lambda s: None
    )
    assert got == [] and len(calls) == 3  # the last try's result, not an error


def test_each_retry_is_one_log_line_on_the_callers_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mine = logging.getLogger("tests.retrying")
    fn = Failing(ThrottledError("slow down"), ThrottledError("slow down"))
    with caplog.at_level(logging.DEBUG):
        retrying(
            "GetRecords s/shard-1",
            fn,
            backoff=ExponentialBackoff(0.25),
            attempts=3,
            sleep=lambda s: None,
            level=logging.WARNING,
            logger=mine,
        )
    said = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert said == [
        ("tests.retrying", logging.WARNING, "GetRecords s/shard-1: slow down; retry 1 in 0.25s"),
        ("tests.retrying", logging.WARNING, "GetRecords s/shard-1: slow down; retry 2 in 0.50s"),
    ]


# ------------------------------------------------------------------ its users


def test_the_start_retries_throttling_six_times_and_not_an_unreachable_endpoint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fn = Failing(*(ThrottledError("slow down") for _ in range(10)))
    slept: list[float] = []
    with caplog.at_level(logging.WARNING), pytest.raises(ThrottledError):
        startup_call(fn, "orders", ExponentialBackoff(0.5, cap=4.0), slept.append)
    assert fn.calls == STARTUP_ATTEMPTS == 6 and slept == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert "opening orders: slow down; retry 1 in 0.50s" in caplog.text
    fn = Failing(EndpointUnreachableError("refused"))
    with pytest.raises(EndpointUnreachableError):
        startup_call(fn, "orders", NoBackoff(), no_wait)
    assert fn.calls == 1


class RefusingKinesis:
    """PutRecords that refuses the last ``refuse(call)`` records of each call."""

    def __init__(self, refuse: Callable[[int], int]) -> None:
        self.refuse = refuse
        self.calls: list[int] = []

    def put_records(self, StreamName: str, Records: list[Any]) -> dict[str, Any]:  # noqa: N803
        self.calls.append(len(Records))
        n = len(Records)
        bad = self.refuse(len(self.calls))
        out = [{"SequenceNumber": f"{len(self.calls)}-{i}"} for i in range(n - bad)]
        return {"Records": out + [{"ErrorCode": "ProvisionedThroughputExceededException"}] * bad}


def entry(n: int) -> dict[str, Any]:
    return {"message_id": f"m{n}", "partition_key": "pk", "data_base64": "eA=="}


def test_redrive_puts_the_refused_entries_again_and_records_each_accepted_one() -> None:
    kinesis = RefusingKinesis(lambda call: {1: 3, 2: 1}.get(call, 0))
    slept: list[float] = []
    recorded: list[str] = []
    done = put_entries(
        kinesis,
        "s",
        [entry(n) for n in range(5)],
        sleep=slept.append,
        record=lambda rs: recorded.extend(r.message_id for r in rs),
    )
    assert done == 5 and kinesis.calls == [5, 3, 1] and slept == [0.1, 0.2]
    assert sorted(recorded) == [f"m{n}" for n in range(5)]


def test_redrive_gives_up_after_its_attempts_naming_the_stream() -> None:
    kinesis = RefusingKinesis(lambda call: 2)
    slept: list[float] = []
    with pytest.raises(DeadLetterCommandError, match="stream 's' refused 2 records 8 times"):
        put_entries(kinesis, "s", [entry(n) for n in range(4)], sleep=slept.append)
    assert len(kinesis.calls) == PUT_ATTEMPTS == 8
    assert slept == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0]


class ThrottledReads:
    """A first read's ``once`` that Kinesis throttles ``n`` times, then ``got``."""

    class api:  # noqa: N801
        stream_name = "s"

    shard_id = "shard-1"

    def __init__(self, n: int, got: list[Any]) -> None:
        self.n, self.got, self.calls = n, got, 0

    def once(self) -> tuple[list[Any], Any]:
        from kinesis_spout.streaming.shard_reader import ReadAhead

        self.calls += 1
        if self.calls <= self.n:
            return [], ReadAhead(self.shard_id, None, False, None, ThrottledError("slow down"))
        return self.got, ReadAhead(self.shard_id, None, True, None)


def test_a_first_read_is_read_again_while_throttled_before_any_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from kinesis_spout.streaming.executor_read import READ_ATTEMPTS, _read_once

    read = ThrottledReads(2, ["r"])
    slept: list[float] = []
    with caplog.at_level(logging.INFO, logger="kinesis_spout.streaming.executor_read"):
        records, ahead = _read_once(read, slept.append)  # type: ignore[arg-type]
    assert records == ["r"] and ahead.error is None and read.calls == 3 and slept == [0.2, 0.4]
    assert "read of s/shard-1: slow down; retry 1 in 0.20s" in caplog.text
    read = ThrottledReads(100, [])
    records, ahead = _read_once(read, slept.append)  # type: ignore[arg-type]
    assert records == [] and isinstance(ahead.error, ThrottledError)  # kept, not raised
    assert read.calls == READ_ATTEMPTS == 6
