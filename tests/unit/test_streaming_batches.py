"""Batch plans and batch-end records of the streaming source: pure logic and the
file store, with a fake shard listing (no Kinesis, no Spark)."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kit import FakeClock
from test_streaming_read_logic import MemoryShard

from kinesis_spout.checkpoint.batch_ends import BatchEnd, BatchEndError, PlannedFrom
from kinesis_spout.checkpoint.file_batch_ends import FileBatchEnds
from kinesis_spout.config import InitialPosition
from kinesis_spout.kinesis.api import GetRecordsResult
from kinesis_spout.records import ShardInfo, ShardPosition, StartPosition
from kinesis_spout.streaming.batch_offset import BatchOffset, ShardPlan, StreamsOffset
from kinesis_spout.streaming.errors import DataLossError, OffsetError
from kinesis_spout.streaming.executor_read import read_batch_shard
from kinesis_spout.streaming.options import parse_options
from kinesis_spout.streaming.planner import Planner, ShardRead
from kinesis_spout.streaming.streams import SourceStreams

A, B, C = "shardId-a", "shardId-b", "shardId-c"
RUN = "r1"


def pos(seq: int, n: int = 1, ended: bool = False) -> ShardPosition:
    return ShardPosition(str(seq), 0, False, ended, n)


def end(
    seq: int | None,
    n: int = 1,
    *,
    caught_up: bool = False,
    ended: bool = False,
    at: float | None = None,
) -> BatchEnd:
    position = None if seq is None else pos(seq, n, ended)
    return BatchEnd(position, caught_up=caught_up, at=time.time() if at is None else at)


# ------------------------------------------------------------------ offsets


def test_a_batch_offset_round_trips_as_canonical_json() -> None:
    offset = BatchOffset(
        "orders",
        "billing",
        7,
        StartPosition(),
        {B: ShardPlan(None, 10, (A,)), A: ShardPlan(pos(5, 3, ended=True))},
    )
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
            {
                "version": 2,
                "stream": "s",
                "job": "j",
                "batch": 1,
                "start": {"type": "TRIM_HORIZON"},
                "shards": {A: {"q": -2}},
            },
            "'q' must be an integer >= 0",
        ),
    ],
)
def test_a_bad_offset_is_named(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(OffsetError, match=message):
        BatchOffset.from_json(doc)


# ------------------------------------------------------------------ the file store


def test_the_first_record_of_a_batch_and_shard_wins(tmp_path: Path) -> None:
    store = FileBatchEnds(str(tmp_path), "job", "orders")
    first, second = end(10, 4), end(12, 6)
    assert store.get(RUN, 3, A) is None
    assert store.record(RUN, 3, A, first) == first
    assert store.record(RUN, 3, A, second) == first  # a later attempt gets the first's end
    assert store.get(RUN, 3, A) == first
    batch_dir = tmp_path / "job" / "orders.batches" / f"run-{RUN}" / f"{3:012d}"
    assert not list(batch_dir.glob(".*tmp"))


def test_a_corrupt_record_is_an_error_naming_where(tmp_path: Path) -> None:
    store = FileBatchEnds(str(tmp_path), "job", "orders")
    store.record(RUN, 2, A, end(1))
    path = Path(store.where(RUN, 2, A))
    path.write_text('{"position": 5}')
    with pytest.raises(BatchEndError, match=f"corrupt batch-end record at {path}"):
        store.get(RUN, 2, A)
    path.write_bytes(b"\x00garbage")
    with pytest.raises(BatchEndError, match="not JSON"):
        store.get(RUN, 2, A)


def test_a_records_iterator_is_stored_and_records_without_one_still_read(
    tmp_path: Path,
) -> None:
    store = FileBatchEnds(str(tmp_path), "job", "orders")
    with_it = dataclasses.replace(end(7, 2), iterator="it-7")
    assert store.record(RUN, 1, A, with_it) == with_it
    assert FileBatchEnds(str(tmp_path), "job", "orders").get(RUN, 1, A) == with_it
    without = end(7, 2)
    assert "iterator" not in without.to_json()  # as an earlier release wrote them
    assert BatchEnd.from_json(without.to_json(), "x") == without
    with pytest.raises(BatchEndError, match="iterator must be a string"):
        BatchEnd.from_json({**with_it.to_json(), "iterator": 5}, "x")


def test_records_of_earlier_batches_are_removed(tmp_path: Path) -> None:
    store = FileBatchEnds(str(tmp_path), "job", "orders")
    for b in range(1, 6):
        store.record(RUN, b, A, end(b))
    assert store.forget_before(RUN, 4) == 3
    assert [store.get(RUN, b, A) is not None for b in range(1, 6)] == [False] * 3 + [True] * 2


# ------------------------------------------------------------------ planning


class FakeApi:
    stream_name = "orders"

    def __init__(self, shards: list[ShardInfo], server_time: datetime | None = None) -> None:
        self.shards = shards
        self.server_time = server_time

    def list_shards(self) -> list[ShardInfo]:
        return self.shards

    def check_stream(self) -> str:
        return "ACTIVE"


def planner(
    tmp_path: Path,
    shards: list[ShardInfo],
    clock: FakeClock | None = None,
    server_time: datetime | None = None,
    **options: str,
) -> Planner:
    opts = parse_options(
        {
            "streamname": "orders",
            "checkpointstore": f"file://{tmp_path}",
            "jobname": "billing",
            **{k.lower(): v for k, v in options.items()},
        },
        env={},
    )
    opts = dataclasses.replace(opts, shard_list_interval=0.0)
    streams = SourceStreams(opts, {"orders": FakeApi(shards, server_time)})  # type: ignore[dict-item]
    if clock is None:
        return Planner(opts, streams=streams)
    return Planner(opts, clock=clock, sleep=clock.sleep, streams=streams)


def initial(p: Planner) -> BatchOffset:
    """The initial offset of the planner's one stream."""
    return p.initial_offset().parts["orders"]


def latest(p: Planner, start: dict[str, Any] | None, total: int | None) -> BatchOffset:
    """The next offset of the planner's one stream (its JSON is the source's)."""
    return p.latest(start, total).parts["orders"]


def record(p: Planner, batch: int, shard: str, e: BatchEnd) -> BatchEnd:
    """What the task reading ``shard`` in the planner's last planned ``batch`` records."""
    planned_last = p._last_planned  # noqa: SLF001
    assert planned_last is not None
    offset = planned_last.parts["orders"]
    assert offset.batch == batch
    planned = PlannedFrom.of(offset.run, offset.shards[shard], offset.start)
    return p.streams.store("orders").record(
        offset.run, batch, shard, dataclasses.replace(e, planned=planned)
    )


@pytest.mark.parametrize("skew", [timedelta(minutes=-10), timedelta(minutes=10), None])
def test_latest_is_pinned_by_the_servers_clock_less_a_margin(
    tmp_path: Path, skew: timedelta | None
) -> None:
    """``initialPosition=latest`` starts at the server's time (the ``Date`` header of the
    stream check, whole seconds) less one second: a driver whose clock runs ahead of the
    server's would skip what was written after the query started. Without a ``Date``, the
    driver's clock less the margin. The old code took the driver's clock."""
    local = datetime.now(UTC)
    server = None if skew is None else (local + skew).replace(microsecond=0)
    p = planner(tmp_path, [ShardInfo(A)], server_time=server, initialPosition="latest")
    start = initial(p).start
    assert start.kind is InitialPosition.AT_TIMESTAMP and start.timestamp is not None
    if server is not None:
        assert start.timestamp == server - timedelta(seconds=1)
    else:
        assert local - timedelta(seconds=1.01) <= start.timestamp <= local


def test_latest_offset_plans_without_reading_and_children_wait_for_their_parents(
    tmp_path: Path,
) -> None:
    shards = [ShardInfo(A), ShardInfo(B), ShardInfo(C, parent_shard_id=A)]
    p = planner(tmp_path, shards, maxRecordsPerShard="50")
    first = latest(p, initial(p).to_json(), None)
    assert (first.batch, first.reads) == (1, {A: ShardPlan(None, 50), B: ShardPlan(None, 50)})
    record(p, 1, A, end(9, 9, ended=True))  # A ends in batch 1
    record(p, 1, B, end(4, 4))
    second = latest(p, first.to_json(), 6)  # a ReadMaxRows(6) limit
    assert second.batch == 2
    assert second.shards[A] == ShardPlan(pos(9, 9, ended=True))  # ended: kept, no quota
    assert second.shards[B].position == pos(4, 4)
    assert second.shards[C] == ShardPlan(None, second.shards[C].quota, (A,))  # lineage
    assert sum(plan.quota for plan in second.reads.values()) == 6 and set(second.reads) == {B, C}


def test_shards_at_their_tip_rest_so_an_idle_stream_gets_no_batch(tmp_path: Path) -> None:
    import time

    clock = FakeClock(time.time())  # wall time: a batch end's time is a wall time
    p = planner(tmp_path, [ShardInfo(A)], clock)
    first = latest(p, initial(p).to_json(), None)
    record(p, 1, A, dataclasses.replace(end(None, caught_up=True), at=time.time()))
    assert latest(p, first.to_json(), None) == first  # resting: no new batch
    record(p, 1, A, end(None))  # (already recorded: first one wins)
    clock.advance(3600)  # the rest is over
    assert latest(p, first.to_json(), None).batch == 2


def test_a_shard_whose_read_was_not_recorded_is_read_again_from_the_same_position(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """B's task never ran (the batch's function computed only A's partition): B keeps
    the position batch 1 planned it from, in the next batch and in batch 1's commit,
    and a warning names it. The records of a late attempt change neither."""
    from kinesis_spout.checkpoint import open_store

    p = planner(tmp_path, [ShardInfo(A), ShardInfo(B)])
    first = latest(p, initial(p).to_json(), None)
    record(p, 1, A, end(3, 4))
    with caplog.at_level("WARNING", logger="kinesis_spout.streaming.shard_ends"):
        second = latest(p, first.to_json(), None)
    assert second.batch == 2
    assert second.shards[A].position == pos(3, 4)
    assert second.shards[B].position == first.shards[B].position is None
    assert set(second.reads) == {A, B}
    assert "batch 1 of orders: no read recorded for shard(s) shardId-b" in caplog.text

    p.streams.store("orders").record(  # a late attempt of B's task (its partition ran late)
        first.run,
        1,
        B,
        dataclasses.replace(
            end(7, 8), planned=PlannedFrom.of(first.run, first.shards[B], first.start)
        ),
    )
    p.commit(StreamsOffset.of([first]))
    store = open_store(f"file://{tmp_path}", "billing")
    try:
        assert {s: c.sequence_number for s, c in store.load("orders").items()} == {A: "3"}
    finally:
        store.close()


def test_an_offset_of_another_stream_or_job_is_refused(tmp_path: Path) -> None:
    p = planner(tmp_path, [ShardInfo(A)])
    doc = initial(p).to_json()
    with pytest.raises(OffsetError, match="job 'other'.*as job 'billing'"):
        p.parse({**doc, "job": "other"})
    with pytest.raises(OffsetError, match="stream 'payments'"):
        p.parse({**doc, "stream": "payments"})


def test_commit_writes_the_checkpoints_and_drops_older_records(tmp_path: Path) -> None:
    from kinesis_spout.checkpoint import open_store

    p = planner(tmp_path, [ShardInfo(A)])
    offset = initial(p)
    for b in (1, 2, 3):
        offset = latest(p, offset.to_json(), None)
        record(p, b, A, end(10 * b, 10))
    p.commit(StreamsOffset.of([offset]))
    store = open_store(f"file://{tmp_path}", "billing")
    try:
        assert store.load("orders")[A].sequence_number == "30"
    finally:
        store.close()
    assert [p.streams.store("orders").get(offset.run, b, A) is not None for b in (1, 2, 3)] == [
        False,
        False,
        True,
    ]


def test_available_now_ends_once_every_shard_reached_the_cutoff(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    clock = FakeClock()
    p = planner(tmp_path, [ShardInfo(A), ShardInfo(B)], clock, maxRecordsPerShard="5")
    p.cutoff = datetime.now(UTC)  # prepareForTriggerAvailableNow
    first = latest(p, initial(p).to_json(), None)
    assert first.cutoff == p.cutoff and BatchOffset.from_json(first.to_json()) == first
    record(p, 1, A, end(5, 5))  # quota reached: more may follow
    record(p, 1, B, end(2, 2, caught_up=True))  # reached the cutoff
    second = latest(p, first.to_json(), None)
    assert set(second.reads) == {A}
    record(p, 2, A, end(7, 2, caught_up=True))
    clock.advance(3600)  # even after any rest
    assert latest(p, second.to_json(), None) == second  # no new batch: the query stops


def test_available_now_reads_on_after_an_earlier_query_caught_up(tmp_path: Path) -> None:
    """A restarted availableNow query: the last batch of the earlier query reached the
    tip before this query's cutoff, so records may have arrived since; it reads on."""
    from datetime import UTC, datetime

    clock = FakeClock()
    p = planner(tmp_path, [ShardInfo(A)], clock, maxRecordsPerShard="5")
    first = latest(p, initial(p).to_json(), None)
    record(p, 1, A, end(5, 5, caught_up=True, at=time.time() - 60))  # a minute ago
    clock.advance(3600)  # its rest is long over
    p.cutoff = datetime.now(UTC)  # the new query's prepareForTriggerAvailableNow
    second = latest(p, first.to_json(), None)
    assert second.batch == first.batch + 1 and set(second.reads) == {A}  # not taken as done


def test_available_now_reads_on_after_a_batch_cut_at_an_earlier_querys_cutoff(
    tmp_path: Path,
) -> None:
    """A restarted availableNow query first runs the batch the earlier query planned, with
    that query's older cutoff: its read stops there (counted as at its tip) after this
    query's cutoff was set. That says nothing about the records that arrived between the
    two cutoffs: the shard reads on. The old code took it as done and ended the query."""
    clock = FakeClock()
    p = planner(tmp_path, [ShardInfo(A)], clock, maxRecordsPerShard="5")
    p.cutoff = datetime.now(UTC) - timedelta(minutes=1)  # the earlier query's
    first = latest(p, initial(p).to_json(), None)
    p.cutoff = datetime.now(UTC)  # the new query's prepareForTriggerAvailableNow
    record(p, 1, A, end(3, 3, caught_up=True))  # stopped at the old cutoff, just now
    clock.advance(3600)  # even after any rest
    second = latest(p, first.to_json(), None)
    assert second.batch == first.batch + 1 and set(second.reads) == {A}
    assert second.cutoff == p.cutoff
    record(p, 2, A, end(6, 3, caught_up=True))  # at its tip after this query's cutoff
    clock.advance(3600)
    assert latest(p, second.to_json(), None) == second  # now done: the query ends


# ------------------------------------------------------------------ records of other plans


def test_runs_keep_their_records_apart(tmp_path: Path) -> None:
    store = FileBatchEnds(str(tmp_path), "job", "orders")
    store.record("old", 1, A, end(40, 10))
    assert store.get("new", 1, A) is None  # a new checkpoint location starts clean
    assert store.get("", 1, A) is None  # and offsets of earlier releases see neither


def test_a_record_planned_from_another_plan_is_refused_naming_both(tmp_path: Path) -> None:
    p = planner(tmp_path, [ShardInfo(A)], maxRecordsPerShard="5")
    first = latest(p, initial(p).to_json(), None)
    other = PlannedFrom(first.run, pos(15, 5), StartPosition(), 10)
    p.streams.store("orders").record(
        first.run, 1, A, dataclasses.replace(end(40, 10), planned=other)
    )
    with pytest.raises(
        BatchEndError,
        match=r"planned from run .*'seq': '15'.*quota 10, but "
        r"this batch is planned from run .*'TRIM_HORIZON'.*quota 5",
    ):
        latest(p, first.to_json(), None)


def test_the_executor_refuses_a_record_of_another_plan_before_reading(tmp_path: Path) -> None:
    from kinesis_spout.streaming.executor_read import read_batch_shard

    store = FileBatchEnds(str(tmp_path), "job", "orders")
    plan, start = ShardPlan(pos(15, 5), 5), StartPosition()
    other = PlannedFrom("r1", pos(30, 10), start, 10)
    store.record("r1", 4, A, dataclasses.replace(end(40, 10), planned=other))
    pages = read_batch_shard(None, store, 4, A, plan, start, run="r1", fetch=100)  # type: ignore[arg-type]
    with pytest.raises(BatchEndError, match=f"record at {store.where('r1', 4, A)} was planned"):
        next(pages)


def test_a_record_of_an_earlier_release_is_used_only_under_its_offsets(tmp_path: Path) -> None:
    p = planner(tmp_path, [ShardInfo(A)], maxRecordsPerShard="5")
    legacy = dataclasses.replace(initial(p), run="")  # no run: an earlier release
    first = latest(p, legacy.to_json(), None)
    assert first.run == "" and "run" not in first.to_json()
    p.streams.store("orders").record("", 1, A, end(5, 5))  # no plan in it
    assert latest(p, first.to_json(), None).shards[A].position == pos(5, 5)
    fresh = planner(tmp_path, [ShardInfo(A)], maxRecordsPerShard="5")
    ran = latest(fresh, initial(fresh).to_json(), None)
    p.streams.store("orders").record(ran.run, 1, A, end(5, 5))
    with pytest.raises(BatchEndError, match="unknown plan"):
        latest(fresh, ran.to_json(), None)


def test_a_leftover_attempt_of_a_removed_batch_records_nothing(tmp_path: Path) -> None:
    from kinesis_spout.streaming.executor_read import read_batch_shard

    store = FileBatchEnds(str(tmp_path), "job", "orders")
    for b in (1, 2, 3):
        store.record(RUN, b, A, end(b))
    store.forget_before(RUN, 3)  # batch 3 committed
    with pytest.raises(BatchEndError, match="batch 2 was committed.*leftover"):
        store.record(RUN, 2, A, end(2))  # a zombie that looked before the cleanup
    assert store.get(RUN, 2, A) is None and not Path(store.where(RUN, 2, A)).parent.exists()
    assert store.floor(RUN) == 3 and store.floor("other") == 0
    pages = read_batch_shard(
        None, store, 1, A, ShardPlan(None, 5), StartPosition(), run=RUN, fetch=100
    )  # type: ignore[arg-type]
    with pytest.raises(BatchEndError, match="batch 1 was committed"):
        next(pages)  # before any read
    assert store.forget_before(RUN, 2) == 0 and store.floor(RUN) == 3  # never goes down


# ------------------------------------------------------------------ availableNow waits out rests


@pytest.mark.parametrize(
    ("last", "rest"),
    [
        (dict(throttled=True), 1.0),  # THROTTLE_REST
        (dict(caught_up=True), 0.25),  # at the tip before the cutoff: idle_poll_interval
    ],
)
def test_available_now_waits_out_a_rest_instead_of_ending_early(
    tmp_path: Path, last: dict[str, bool], rest: float
) -> None:
    """Issue 25, hole 7: returning ``start`` while a shard rests ends an availableNow
    query (Spark takes it as "nothing more") with records before the cutoff unread."""
    from datetime import UTC, datetime

    clock = FakeClock(time.time())  # wall time: the cutoff and the ends are datetimes
    p = planner(tmp_path, [ShardInfo(A), ShardInfo(B)], clock, maxRecordsPerShard="5")
    p.cutoff = datetime.fromtimestamp(clock.now, UTC)
    first = latest(p, initial(p).to_json(), None)
    at = clock.now - 0.01  # just before the cutoff, or throttled at once
    record(p, 1, A, BatchEnd(pos(3, 3), at=at, **last))
    record(p, 1, B, end(2, 2, caught_up=True, at=clock.now + 0.5))  # B reached the cutoff
    second = latest(p, first.to_json(), None)
    assert second != first, "the query would end with records of A before the cutoff unread"
    assert set(second.reads) == {A} and second.shards[A].position == pos(3, 3)
    assert clock.slept == [pytest.approx(rest - 0.01)]  # the rest, waited once
    record(p, 2, A, end(5, 2, caught_up=True, at=clock.now))
    assert latest(p, second.to_json(), None) == second  # every shard at the cutoff: it ends
    assert len(clock.slept) == 1


def test_without_a_cutoff_a_resting_stream_gets_no_batch_and_no_wait(tmp_path: Path) -> None:
    clock = FakeClock(time.time())  # wall time: the cutoff and the ends are datetimes
    p = planner(tmp_path, [ShardInfo(A)], clock)
    first = latest(p, initial(p).to_json(), None)
    record(p, 1, A, BatchEnd(None, throttled=True, at=clock.now))
    assert latest(p, first.to_json(), None) == first and clock.slept == []


class GapShard(MemoryShard):
    """A shard whose first records sit behind ``gap`` empty pages (Kinesis walks old,
    sparse data one empty page at a time, each behind the tip)."""

    def __init__(self, subs: list[int], gap: int) -> None:
        super().__init__(subs)
        self.gap = gap

    def get_records(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
        step = int(iterator[1:]) if iterator.startswith("g") else 0 if iterator == "0" else None
        if step is None or step >= self.gap:
            return super().get_records(shard_id, "0" if step is not None else iterator, limit)
        self.calls += 1
        return GetRecordsResult([], f"g{step + 1}", 86_400_000, (), 0)


def iterator(p: Planner, start: BatchOffset, offset: BatchOffset) -> str | None:
    """The iterator the planner hands the task reading A in ``offset``'s batch."""
    (read,) = p.reads(StreamsOffset.of([start]), StreamsOffset.of([offset]), ShardRead)
    return read.iterator


def test_a_shard_behind_more_empty_pages_than_one_read_makes_reaches_its_records(
    tmp_path: Path,
) -> None:
    """Each read walks at most 50 pages; the next batch goes on from the iterator the
    one before recorded (the task gets it with its partition), so a gap of 120 empty
    pages takes three batches. Opening at the position each time never got past it."""
    shard = GapShard([1, 1, 1], gap=120)
    p = planner(tmp_path, [ShardInfo(A)])
    offset, got, batches = initial(p), [], 0
    while not got and batches < 5:
        nxt = latest(p, offset.to_json(), None)
        hint = iterator(p, offset, nxt)
        assert (hint is None) == (batches == 0)
        pages = read_batch_shard(
            shard,  # type: ignore[arg-type]
            p.streams.store("orders"),
            nxt.batch,
            A,
            nxt.shards[A],
            nxt.start,
            run=nxt.run,
            fetch=100,
            iterator=hint,
        )
        got = [r.sequence_number for page in pages for r in page]
        offset, batches = nxt, batches + 1
    assert got == ["1", "2", "3"] and batches == 3
    assert shard.calls == 121  # each empty page once, then the records' page


def test_a_replay_soon_after_goes_on_from_the_iterator_its_first_read_started_from(
    tmp_path: Path,
) -> None:
    """A partition computed again replays its recorded range from the same iterator as
    its first read: 600 empty pages (more than a replay walks) are not walked again."""
    shard = GapShard([1, 1, 1], gap=600)
    p = planner(tmp_path, [ShardInfo(A)])
    offset, got = initial(p), []
    while not got:
        nxt = latest(p, offset.to_json(), None)
        hint = iterator(p, offset, nxt)
        args = (shard, p.streams.store("orders"), nxt.batch, A, nxt.shards[A], nxt.start)
        got = [
            r
            for page in read_batch_shard(*args, run=nxt.run, fetch=100, iterator=hint)
            for r in page
        ]
        offset = nxt
    calls = shard.calls
    again = [
        r for page in read_batch_shard(*args, run=nxt.run, fetch=100, iterator=hint) for r in page
    ]
    assert again == got and shard.calls == calls + 1
    with pytest.raises(DataLossError, match="the batch planned 3 records"):
        list(read_batch_shard(*args, run=nxt.run, fetch=100))  # expired: walked from the start
