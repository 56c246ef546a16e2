"""A recorded read (first read, its end recorded first writer wins, or the recorded
range read again and checked), the one the Spark job's read tasks and the streaming
source share: against the file store and an in-memory shard."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from test_streaming_read_logic import MemoryShard

from kinesis_spout.checkpoint.batch_ends import BatchEnd, BatchEndError, PlannedFrom
from kinesis_spout.checkpoint.file_batch_ends import FileBatchEnds
from kinesis_spout.checkpoint.recorded_read import RecordedAt, ShardRange, read_once, replay
from kinesis_spout.errors import DataLossError
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.records import ShardPosition, StartPosition
from kinesis_spout.streaming.shard_reader import polling_getter

PLANNED = PlannedFrom("r1", None, StartPosition(), 10)


def at(tmp_path: Path, batch: int = 1) -> RecordedAt:
    return RecordedAt(FileBatchEnds(str(tmp_path), "job", "orders"), "r1", batch, "a", PLANNED)


def end(last: int, count: int, reader: str) -> BatchEnd:
    return BatchEnd(ShardPosition(str(last), count=count), at=1.0, reader=reader, planned=PLANNED)


def replay_into(replays: list[BatchEnd]) -> Callable[[BatchEnd], str]:
    def again(recorded: BatchEnd) -> str:
        replays.append(recorded)
        return "replayed"

    return again


def never_read() -> tuple[str, BatchEnd]:
    raise AssertionError("this attempt read")


def test_an_attempt_keeps_its_records_when_the_recorded_range_is_the_one_it_read(
    tmp_path: Path,
) -> None:
    """Recorded by this attempt, or by another that read the same range meanwhile (a
    speculative copy): its own records, nothing read again."""
    replays: list[BatchEnd] = []
    mine = at(tmp_path, 1)
    assert read_once(mine, lambda: ("mine", end(5, 5, "me")), replay_into(replays)) == "mine"
    assert mine.recorded() == end(5, 5, "me")
    late = at(tmp_path, 2)

    def first() -> tuple[str, BatchEnd]:
        late.record(end(5, 5, "them"))
        return "mine", end(5, 5, "me")

    assert read_once(late, first, replay_into(replays)) == "mine" and replays == []


def test_an_attempt_returns_the_range_another_attempt_recorded(tmp_path: Path) -> None:
    """Recorded before it looked: it never reads; recorded while it read (a longer
    range): the recorded range, read again."""
    replays: list[BatchEnd] = []
    before = at(tmp_path, 1)
    before.record(end(5, 5, "them"))
    assert read_once(before, never_read, replay_into(replays)) == "replayed"
    raced = at(tmp_path, 2)

    def first() -> tuple[str, BatchEnd]:
        raced.record(end(3, 3, "them"))
        return "mine", end(8, 8, "me")

    assert read_once(raced, first, replay_into(replays)) == "replayed"
    assert replays == [end(5, 5, "them"), end(3, 3, "them")]


def test_a_leftover_or_a_record_of_another_plan_fails_before_any_read(tmp_path: Path) -> None:
    rec = at(tmp_path, 4)
    rec.store.record("r1", 4, "a", dataclasses.replace(end(5, 5, "x"), planned=None))
    with pytest.raises(BatchEndError, match="unknown plan"):
        read_once(rec, never_read, replay_into([]))
    rec.store.forget_before("r1", 5)
    with pytest.raises(BatchEndError, match="batch 4 was committed"):
        read_once(rec, never_read, replay_into([]))


def test_a_replay_that_cannot_read_the_recorded_range_is_data_loss() -> None:
    shard = MemoryShard([1] * 6)
    rng = ShardRange("a", ShardPosition("1"), StartPosition(), ShardPosition("4", count=3))

    def getter() -> KinesisShardGetter:
        return polling_getter(shard, "a", rng.after, rng.start, 2)  # type: ignore[arg-type]

    pages, read = replay(getter(), rng, stream="s")
    assert [r.sequence_number for p in pages for r in p] == ["2", "3", "4"]
    assert read.taken == 3 and not read.cut
    lying = dataclasses.replace(rng, last=ShardPosition("9", count=3))  # re-created stream
    with pytest.raises(DataLossError, match=r"s/a: the batch planned 3 records after .* up to"):
        replay(getter(), lying, stream="s")
    said: list[str] = []
    pages, _ = replay(getter(), lying, stream="s", on_loss=said.append)
    assert len(said) == 1 and [r.sequence_number for p in pages for r in p] == ["2", "3", "4"]
