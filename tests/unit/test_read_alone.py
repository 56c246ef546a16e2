"""The driver's one-record read of a record that killed its worker
(:func:`kinesis_spout.spark.read.alone.read_alone`), against an in-memory shard."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from test_streaming_read_logic import FakeClock, MemoryShard

from kinesis_spout.errors import ThrottledError
from kinesis_spout.kinesis.api import GetRecordsResult
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.records import GetterPosition, ShardBatch
from kinesis_spout.spark.read.alone import (
    ATTEMPTS,
    MAX_EMPTY_BEHIND,
    SECONDS,
    keep_reached,
    read_alone,
)
from kinesis_spout.spark.read.plan import ReadPlan
from tracker import ExponentialBackoff, SequenceKey


class GapBefore(MemoryShard):
    """Kinesis record ``at`` (1-based) sits behind ``gap`` empty pages, each behind the
    tip (Kinesis walks a gap in time one empty page at a time); iterators inside the
    gap are ``g<step>``."""

    def __init__(self, subs: list[int], at: int, gap: int) -> None:
        super().__init__(subs)
        self.at, self.gap = at, gap

    def get_records(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
        if iterator.startswith("g"):
            step = int(iterator[1:])
        elif int(iterator) == self.at - 1:
            step = 0
        else:
            return super().get_records(shard_id, iterator, limit)
        if step >= self.gap:
            return super().get_records(shard_id, str(self.at - 1), limit)
        self.calls += 1
        return GetRecordsResult([], f"g{step + 1}", 3_600_000, (), 0)


def plan_after(seq: int) -> ReadPlan:
    """A read task of limit 1 from after Kinesis record ``seq`` (its worker died)."""
    return ReadPlan(1, "shard-0", GetterPosition(after=SequenceKey(seq, 0)), 1)


BACKOFF = ExponentialBackoff(base=0.1, cap=1.0)


def alone(
    shard: MemoryShard, plan: ReadPlan, clock: FakeClock, backoff: ExponentialBackoff = BACKOFF
) -> tuple[KinesisShardGetter, ShardBatch]:
    """``read_alone`` on the in-memory shard, its time that of ``clock``."""
    return read_alone(shard, plan, backoff, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]


def read(shard: MemoryShard, plan: ReadPlan) -> tuple[list[str], str | None]:
    _, page = alone(shard, plan, FakeClock())
    return [r.sequence_number for r in page.records], None if page.error is None else str(
        page.error
    )


@pytest.mark.parametrize("gap", [0, ATTEMPTS, MAX_EMPTY_BEHIND - 1])
def test_the_record_behind_a_gap_of_empty_pages_is_read(gap: int) -> None:
    """The record a task of one record died on is read however many empty pages lie
    between the position and it, within the bound: before the fix, more than
    ``ATTEMPTS`` (5) empty pages left it unread, and the next cycle searched again."""
    shard = GapBefore([1, 1, 1, 1], at=3, gap=gap)
    assert read(shard, plan_after(2)) == (["3"], None)
    assert shard.calls == gap + 1


def walk_to(
    shard: MemoryShard, plan: ReadPlan, after_each: Callable[[KinesisShardGetter, int], None]
) -> tuple[list[str], int]:
    """``read_alone`` read after read (at most 5) until it gets the record, the driver's
    getter keeping what each read reached (``keep_reached``, as the planner's walk does);
    ``after_each(driver, reads)`` looks at the driver after each read that got nothing.
    Returns the record's sequence numbers and the reads made."""
    clock = FakeClock()
    assert plan.position is not None
    driver = KinesisShardGetter(shard, "shard-0", backoff=BACKOFF, start=plan.position.after)  # type: ignore[arg-type]
    reads, got = 0, list[str]()
    while not got and reads < 5:
        getter, page = alone(shard, plan, clock)
        got, reads = [r.sequence_number for r in page.records], reads + 1
        if not got:
            keep_reached(driver, plan, getter)
            after_each(driver, reads)
            plan = replace(plan, position=driver.position)
    return got, reads


def test_a_gap_longer_than_one_cycle_walks_is_walked_over_several() -> None:
    """One read walks at most ``MAX_EMPTY_BEHIND`` empty pages; the iterator it reached
    (nothing lies between) is where the next read goes on."""
    shard = GapBefore([1, 1, 1], at=3, gap=2 * MAX_EMPTY_BEHIND + 7)

    def reached(driver: KinesisShardGetter, reads: int) -> None:
        assert driver.position.after == SequenceKey(2, 0)
        assert driver.position.iterator == f"g{reads * MAX_EMPTY_BEHIND}"

    assert walk_to(shard, plan_after(2), reached) == (["3"], 3)
    assert shard.calls == 2 * MAX_EMPTY_BEHIND + 7 + 1


class EmptyAggregateInGap(GapBefore):
    """Kinesis records 1, 2, 3 (a KPL aggregate holding no user record) and 4; after
    record 2 a gap of ``gap`` empty pages, record 3 answered (skipped) at its step
    ``agg``, then record 4."""

    def __init__(self, gap: int, agg: int) -> None:
        super().__init__([1, 1, 0, 1], at=4, gap=gap)
        self.agg = agg

    def get_records(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
        iterator = "g0" if iterator == "2" else iterator
        if iterator == f"g{self.agg}":
            self.calls += 1
            return GetRecordsResult(
                [], f"g{self.agg + 1}", 3_600_000, (), 1, skipped=(SequenceKey(3, 0),)
            )
        return super().get_records(shard_id, iterator, limit)


def test_a_gap_with_an_empty_aggregate_inside_is_walked_on_not_again_from_its_start() -> None:
    """The empty aggregate moves the read's last key; the reached iterator is kept all
    the same (the read passed no user record). Before the fix a changed key kept
    nothing of what was reached, and every read walked the gap again from its start."""
    shard = EmptyAggregateInGap(gap=2 * MAX_EMPTY_BEHIND + 7, agg=10)

    def reached(driver: KinesisShardGetter, reads: int) -> None:
        assert driver.position.after == SequenceKey(3, 0)

    # the aggregate's page is not an empty one: 2 reads, not 3
    assert walk_to(shard, plan_after(2), reached) == (["4"], 2)


def test_a_shard_that_keeps_throttling_gives_up_after_the_attempts() -> None:
    shard = GapBefore([1, 1, 1], at=3, gap=0)
    shard.fail_at = set(range(1, 100))
    records, error = read(shard, plan_after(2))
    assert records == [] and error is not None and "slow down" in error
    assert shard.calls == ATTEMPTS


def test_an_empty_page_at_the_tip_ends_the_read() -> None:
    """Past the last record nothing is there to read: one call, no record."""
    shard = MemoryShard([1, 1])
    assert read(shard, plan_after(2)) == ([], None)
    assert shard.calls == 1


class ThrottledGap(GapBefore):
    """Each empty page of the gap comes after four throttled calls."""

    def get_records(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
        self.tries = getattr(self, "tries", 0) + 1
        if self.tries % 5:
            raise ThrottledError("slow down")
        return super().get_records(shard_id, iterator, limit)


def test_throttling_over_a_gap_cannot_stretch_the_drivers_wait() -> None:
    """Errors in a row end the read, but an answer between them starts the count again:
    the read also ends at ``SECONDS``, however the calls and backoffs add up."""
    shard = ThrottledGap([1, 1, 1], at=3, gap=10 * MAX_EMPTY_BEHIND)
    clock = FakeClock()
    _, page = alone(shard, plan_after(2), clock, ExponentialBackoff(base=0.5, cap=10.0))
    assert page.records == [] and 0 < shard.calls < MAX_EMPTY_BEHIND
    assert clock.now <= SECONDS
