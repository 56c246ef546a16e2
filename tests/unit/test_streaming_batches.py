"""Batch plans and batch-end records of the streaming source: pure logic and the
file store, with a fake shard listing (no Kinesis, no Spark)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest

from kinesis_spout.records import ShardInfo
from kinesis_spout.streaming.batch_ends import BatchEnd, BatchEndError, FileBatchEnds
from kinesis_spout.streaming.batch_offset import BatchOffset, ShardPlan
from kinesis_spout.streaming.errors import OffsetError
from kinesis_spout.streaming.offsets import ShardPosition, StartPosition
from kinesis_spout.streaming.options import parse_options
from kinesis_spout.streaming.planner import Planner

A, B, C = "shardId-a", "shardId-b", "shardId-c"


def pos(seq: int, n: int = 1, ended: bool = False) -> ShardPosition:
    return ShardPosition(str(seq), 0, False, ended, n)


def end(
    seq: int | None, n: int = 1, *, caught_up: bool = False, ended: bool = False,
    at: float | None = None,
) -> BatchEnd:  # fmt: skip
    position = None if seq is None else pos(seq, n, ended)
    return BatchEnd(position, caught_up=caught_up, at=time.time() if at is None else at)


# ------------------------------------------------------------------ offsets


def test_a_batch_offset_round_trips_as_canonical_json() -> None:
    offset = BatchOffset(
        "orders", "billing", 7, StartPosition(),
        {B: ShardPlan(None, 10, (A,)), A: ShardPlan(pos(5, 3, ended=True))},
    )  # fmt: skip
    doc = offset.to_json()
    assert list(doc["shards"]) == [A, B]
    assert doc["shards"][B] == {"q": 10, "parents": [A]}
    assert BatchOffset.from_json(json.loads(json.dumps(doc))) == offset
    assert offset.reads == {B: ShardPlan(None, 10, (A,))}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"version": 1, "stream": "s", "shards": {}}, "version 1 was the read-ahead source"),
        ({"version": 2, "stream": "s", "job": "j", "batch": -1, "shards": {}}, "'batch'"),
        ({"version": 2, "stream": "s", "batch": 1, "shards": {}}, "'job'"),
        (
            {"version": 2, "stream": "s", "job": "j", "batch": 1,
             "start": {"type": "TRIM_HORIZON"}, "shards": {A: {"q": -2}}},
            "'q' must be an integer >= 0",
        ),
    ],
)  # fmt: skip
def test_a_bad_offset_is_named(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(OffsetError, match=message):
        BatchOffset.from_json(doc)


# ------------------------------------------------------------------ the file store


def test_the_first_record_of_a_batch_and_shard_wins(tmp_path: Path) -> None:
    store = FileBatchEnds(str(tmp_path), "job", "orders")
    first, second = end(10, 4), end(12, 6)
    assert store.get(3, A) is None
    assert store.record(3, A, first) == first
    assert store.record(3, A, second) == first  # a later attempt gets the first's end
    assert store.get(3, A) == first
    assert not list((tmp_path / "job" / "orders.batches" / f"{3:012d}").glob(".*tmp"))


def test_a_corrupt_record_is_an_error_naming_where(tmp_path: Path) -> None:
    store = FileBatchEnds(str(tmp_path), "job", "orders")
    store.record(2, A, end(1))
    path = Path(store.where(2, A))
    path.write_text('{"position": 5}')
    with pytest.raises(BatchEndError, match=f"corrupt batch-end record at {path}"):
        store.get(2, A)
    path.write_bytes(b"\x00garbage")
    with pytest.raises(BatchEndError, match="not JSON"):
        store.get(2, A)


def test_records_of_earlier_batches_are_removed(tmp_path: Path) -> None:
    store = FileBatchEnds(str(tmp_path), "job", "orders")
    for b in range(1, 6):
        store.record(b, A, end(b))
    assert store.forget_before(4) == 3
    assert [store.get(b, A) is not None for b in range(1, 6)] == [False] * 3 + [True] * 2


# ------------------------------------------------------------------ planning


class FakeApi:
    stream_name = "orders"

    def __init__(self, shards: list[ShardInfo]) -> None:
        self.shards = shards

    def list_shards(self) -> list[ShardInfo]:
        return self.shards

    def check_stream(self) -> str:
        return "ACTIVE"


def planner(tmp_path: Path, shards: list[ShardInfo], **options: str) -> Planner:
    opts = parse_options(
        {"streamname": "orders", "checkpointstore": f"file://{tmp_path}", "jobname": "billing",
         **{k.lower(): v for k, v in options.items()}},
        env={},
    )  # fmt: skip
    p = Planner(dataclasses.replace(opts, shard_list_interval=0.0))
    p._api = FakeApi(shards)  # type: ignore[assignment]  # noqa: SLF001
    return p


def test_latest_offset_plans_without_reading_and_children_wait_for_their_parents(
    tmp_path: Path,
) -> None:
    shards = [ShardInfo(A), ShardInfo(B), ShardInfo(C, parent_shard_id=A)]
    p = planner(tmp_path, shards, maxRecordsPerShard="50")
    first = p.latest(p.initial_offset().to_json(), None)
    assert (first.batch, first.reads) == (1, {A: ShardPlan(None, 50), B: ShardPlan(None, 50)})
    p.store.record(1, A, end(9, 9, ended=True))  # A ends in batch 1
    p.store.record(1, B, end(4, 4))
    second = p.latest(first.to_json(), 6)  # a ReadMaxRows(6) limit
    assert second.batch == 2
    assert second.shards[A] == ShardPlan(pos(9, 9, ended=True))  # ended: kept, no quota
    assert second.shards[B].position == pos(4, 4)
    assert second.shards[C] == ShardPlan(None, second.shards[C].quota, (A,))  # lineage
    assert sum(plan.quota for plan in second.reads.values()) == 6 and set(second.reads) == {B, C}


def test_shards_at_their_tip_rest_so_an_idle_stream_gets_no_batch(tmp_path: Path) -> None:
    import time

    p = planner(tmp_path, [ShardInfo(A)])
    first = p.latest(p.initial_offset().to_json(), None)
    p.store.record(1, A, dataclasses.replace(end(None, caught_up=True), at=time.time()))
    assert p.latest(first.to_json(), None) == first  # resting: no new batch
    p.store.record(1, A, end(None))  # (already recorded: first one wins)
    p._rest_until[A] = 0.0  # noqa: SLF001 - the rest is over
    assert p.latest(first.to_json(), None).batch == 2


def test_a_missing_batch_end_record_stops_the_query_naming_it(tmp_path: Path) -> None:
    p = planner(tmp_path, [ShardInfo(A), ShardInfo(B)])
    first = p.latest(p.initial_offset().to_json(), None)
    p.store.record(1, A, end(3))
    with pytest.raises(BatchEndError, match=r"no batch-end record for batch 1, shard shardId-b"):
        p.latest(first.to_json(), None)


def test_an_offset_of_another_stream_or_job_is_refused(tmp_path: Path) -> None:
    p = planner(tmp_path, [ShardInfo(A)])
    doc = p.initial_offset().to_json()
    with pytest.raises(OffsetError, match="job 'other'.*as job 'billing'"):
        p.parse({**doc, "job": "other"})
    with pytest.raises(OffsetError, match="stream 'payments'"):
        p.parse({**doc, "stream": "payments"})


def test_commit_writes_the_checkpoints_and_drops_older_records(tmp_path: Path) -> None:
    from kinesis_spout.checkpoint import open_store

    p = planner(tmp_path, [ShardInfo(A)])
    offset = p.initial_offset()
    for b in (1, 2, 3):
        offset = p.latest(offset.to_json(), None)
        p.store.record(b, A, end(10 * b, 10))
    p.commit(offset)
    store = open_store(f"file://{tmp_path}", "billing")
    try:
        assert store.load("orders")[A].sequence_number == "30"
    finally:
        store.close()
    assert [p.store.get(b, A) is not None for b in (1, 2, 3)] == [False, False, True]


def test_available_now_ends_once_every_shard_reached_the_cutoff(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    p = planner(tmp_path, [ShardInfo(A), ShardInfo(B)], maxRecordsPerShard="5")
    p.cutoff = datetime.now(UTC)  # prepareForTriggerAvailableNow
    first = p.latest(p.initial_offset().to_json(), None)
    assert first.cutoff == p.cutoff and BatchOffset.from_json(first.to_json()) == first
    p.store.record(1, A, end(5, 5))  # quota reached: more may follow
    p.store.record(1, B, end(2, 2, caught_up=True))  # reached the cutoff
    second = p.latest(first.to_json(), None)
    assert set(second.reads) == {A}
    p.store.record(2, A, end(7, 2, caught_up=True))
    p._rest_until.clear()  # noqa: SLF001 - even after any rest
    assert p.latest(second.to_json(), None) == second  # no new batch: the query stops


def test_available_now_reads_on_after_an_earlier_query_caught_up(tmp_path: Path) -> None:
    """A restarted availableNow query: the last batch of the earlier query reached the
    tip before this query's cutoff, so records may have arrived since; it reads on."""
    from datetime import UTC, datetime

    p = planner(tmp_path, [ShardInfo(A)], maxRecordsPerShard="5")
    first = p.latest(p.initial_offset().to_json(), None)
    p.store.record(1, A, end(5, 5, caught_up=True, at=time.time() - 60))  # a minute ago
    p._rest_until.clear()  # noqa: SLF001 - its rest is long over
    p.cutoff = datetime.now(UTC)  # the new query's prepareForTriggerAvailableNow
    second = p.latest(first.to_json(), None)
    assert second.batch == first.batch + 1 and set(second.reads) == {A}  # not taken as done
