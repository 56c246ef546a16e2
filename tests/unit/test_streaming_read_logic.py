"""Read-ahead and replay logic against an in-memory shard (pure logic; the same
functions run against moto and kinesis-mock in tests/integration/streaming)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kit import FakeClock

from kinesis_spout.checkpoint.recorded_read import ShardRange
from kinesis_spout.config import InitialPosition
from kinesis_spout.errors import CredentialsError, ThrottledError
from kinesis_spout.kinesis.api import GetRecordsResult
from kinesis_spout.records import Record, ShardPosition, StartPosition
from kinesis_spout.streaming.shard_reader import ReadAhead, read_fresh, read_range
from tracker import ExponentialBackoff, SequenceKey

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class MemoryShard:
    """One shard: Kinesis records ``seq`` 1..n, each with ``subs[seq]`` user records.
    Iterators are ``"<index>"`` of the next Kinesis record; ``fail_at`` makes the
    GetRecords call with that number raise throttling."""

    stream_name = "s"

    def __init__(self, subs: list[int], closed: bool = False) -> None:
        self.subs = subs
        self.closed = closed
        self.calls = 0
        self.fail_at: set[int] = set()

    def arrival(self, seq: int) -> datetime:
        return T0 + timedelta(seconds=seq)

    def shard_iterator(
        self,
        shard_id: str,
        *,
        after_sequence: str | None = None,
        at_sequence: str | None = None,
        position: InitialPosition = InitialPosition.TRIM_HORIZON,
        timestamp: datetime | None = None,
    ) -> str:
        if after_sequence is not None:
            return str(int(after_sequence))
        if at_sequence is not None:
            return str(int(at_sequence) - 1)
        if position is InitialPosition.AT_TIMESTAMP:
            assert timestamp is not None
            return str(
                next(
                    (i for i in range(len(self.subs)) if self.arrival(i + 1) >= timestamp),
                    len(self.subs),
                )
            )
        return "0"

    def get_records(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
        self.calls += 1
        if self.calls in self.fail_at:
            raise ThrottledError("slow down")
        start = int(iterator)
        end = min(len(self.subs), start + limit)
        records = [
            Record(
                "s",
                shard_id,
                str(seq),
                i,
                "pk",
                f"{seq}.{i}".encode(),
                self.arrival(seq),
                SequenceKey(seq, i),
            )
            for seq in range(start + 1, end + 1)
            for i in range(self.subs[seq - 1])
        ]
        done = self.closed and end == len(self.subs)
        return GetRecordsResult(records, None if done else str(end), 0, (), end - start)


def read_ahead(*args: Any, **kwargs: Any) -> ReadAhead:
    """Where a first read stopped (its records left out)."""
    return read_fresh(*args, **kwargs)[1]


def keys(records: list[Record]) -> list[tuple[int, int]]:
    return [(r.key.sequence, r.key.sub_sequence) for r in records]


def test_quota_cut_inside_an_aggregate_resumes_at_it() -> None:
    shard = MemoryShard([1, 3, 1])
    ahead = read_ahead(shard, "a", None, StartPosition(), 2, fetch=10)  # type: ignore[arg-type]
    assert ahead.position == ShardPosition("2", 0, partial=True, count=2)
    assert ahead.next_iterator is None  # stopped inside a page: re-open next time
    rest = read_ahead(shard, "a", ahead.position, StartPosition(), 10, fetch=10)  # type: ignore[arg-type]
    assert rest.position == ShardPosition("3", 0, count=3) and rest.idle
    rng = ShardRange("a", ahead.position, StartPosition(), rest.position)
    got = [r for page in read_range(shard, rng, fetch=1) for r in page]  # type: ignore[arg-type]
    assert keys(got) == [(2, 1), (2, 2), (3, 0)]


def test_throttling_cuts_the_read_short_at_an_exact_position() -> None:
    shard = MemoryShard([1] * 10)
    shard.fail_at = {3}
    ahead = read_ahead(shard, "a", None, StartPosition(), 100, fetch=2)  # type: ignore[arg-type]
    assert isinstance(ahead.error, ThrottledError)
    assert ahead.position == ShardPosition("4", 0, count=4)
    assert ahead.next_iterator is None and not ahead.idle


def test_non_retriable_errors_are_raised() -> None:
    class Denied(MemoryShard):
        def get_records(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
            raise CredentialsError("no")

    with pytest.raises(CredentialsError):
        read_ahead(Denied([1]), "a", None, StartPosition(), 5, fetch=5)  # type: ignore[arg-type]


def test_cutoff_leaves_later_records_out_and_counts_as_caught_up() -> None:
    shard = MemoryShard([1] * 10)
    ahead = read_ahead(
        shard,
        "a",
        None,
        StartPosition(),
        100,
        fetch=3,
        cutoff=shard.arrival(5),  # type: ignore[arg-type]
    )
    assert ahead.position == ShardPosition("5", 0, count=5) and ahead.idle


def test_closed_shard_ends_with_or_without_new_records() -> None:
    shard = MemoryShard([1, 2], closed=True)
    ahead = read_ahead(shard, "a", None, StartPosition(), 100, fetch=10)  # type: ignore[arg-type]
    assert ahead.position == ShardPosition("2", 1, ended=True, count=3)
    again = read_ahead(shard, "a", ShardPosition("2", 1), StartPosition(), 100, fetch=10)  # type: ignore[arg-type]
    assert again.position == ShardPosition("2", 1, ended=True, count=0)
    empty = read_ahead(MemoryShard([], closed=True), "b", None, StartPosition(), 9, fetch=9)  # type: ignore[arg-type]
    assert empty.position == ShardPosition(None, ended=True)


def test_at_timestamp_start() -> None:
    shard = MemoryShard([1] * 6)
    start = StartPosition(InitialPosition.AT_TIMESTAMP, shard.arrival(4))
    ahead = read_ahead(shard, "a", None, start, 100, fetch=10)  # type: ignore[arg-type]
    assert ahead.position == ShardPosition("6", 0, count=3)


def test_replay_retries_throttling_with_backoff(fake_clock: FakeClock) -> None:
    shard = MemoryShard([1] * 6)
    rng = ShardRange("a", ShardPosition("1"), StartPosition(), ShardPosition("5", count=4))
    shard.fail_at = {1, 2}
    got = [
        r
        for page in read_range(
            shard,  # type: ignore[arg-type]
            rng,
            fetch=2,
            backoff=ExponentialBackoff(0.1, cap=1.0),
            sleep=fake_clock.sleep,
            clock=fake_clock,
        )
        for r in page
    ]
    assert keys(got) == [(2, 0), (3, 0), (4, 0), (5, 0)]
    assert fake_clock.slept == pytest.approx([0.1, 0.2])


def test_replay_gives_up_after_its_attempts_and_never_retries_permanent_errors(
    fake_clock: FakeClock,
) -> None:
    rng = ShardRange("a", ShardPosition("1"), StartPosition(), ShardPosition("5", count=4))
    shard = MemoryShard([1] * 6)
    shard.fail_at = set(range(1, 100))
    with pytest.raises(ThrottledError):
        list(read_range(shard, rng, fetch=2, attempts=3, sleep=fake_clock.sleep, clock=fake_clock))  # type: ignore[arg-type]
    assert shard.calls == 3

    class Denied(MemoryShard):
        def get_records(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
            self.calls += 1
            raise CredentialsError("no")

    denied = Denied([1] * 6)
    with pytest.raises(CredentialsError):
        list(read_range(denied, rng, fetch=2, attempts=3, sleep=fake_clock.sleep, clock=fake_clock))  # type: ignore[arg-type]
    assert denied.calls == 1
