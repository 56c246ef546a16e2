"""Executor reads keep the replay bound in *user* records, on a real emulator.

The driver's planner and the executor's read task are driven in-process (no
Spark: what is tested is the plan, the read and the tracking of its result).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kit import spout_config
from read_helpers import run_tasks

from devkit.faultproxy import FaultProxy
from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.records import Record
from kinesis_spout.spark.plan import Planner, ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.quarantine import Quarantine
from kinesis_spout.spark.sandbox import Sandbox
from kinesis_spout.spark.task import run_plans
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, kpl_aggregate, put_records

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"


def aggregate(prefix: str, n: int) -> tuple[str, bytes]:
    return kpl_aggregate((f"{prefix}-{u}", f"{prefix}.{u}|x".encode()) for u in range(n))


def reader(endpoint: str, stream: str, tmp_path: Path, store: Any, **kw: Any) -> Planner:
    spout_kw = {k: kw.pop(k) for k in ("clock",) if k in kw}
    values: dict[str, Any] = dict(
        stream_name=stream,
        endpoint_url=endpoint,
        dead_letter=str(tmp_path / "dead"),
        worker_id="w",
        checkpoint_interval=0.5,
        message_timeout=0.0,
    )
    cfg = spout_config(**{**values, **kw})
    spout = KinesisSpout(
        cfg,
        store=store,
        client=make_client(endpoint),
        read_here=False,
        job_lease=False,
        **spout_kw,
    )
    sp = Planner(spout, Quarantine())
    spout.open()
    return sp


def settings_of(sp: Planner, **kw: Any) -> ReadSettings:
    """The read tasks' settings of a planner's job (its streams' targets included)."""
    return sp.settings(replace(ReadSettings.of(sp.spout.config), **kw))


def run_plan(plan: ReadPlan, settings: ReadSettings, fn: Any, batch_id: int) -> ReadResult:
    """One plan as a task of its own."""
    (res,) = run_plans([plan], settings, fn, batch_id)
    return res


@contextmanager
def one_shard_walk(
    moto_server: MotoServer, moto_client: Any, stream: str, tmp_path: Path, *, seed: int
) -> Iterator[tuple[FaultProxy, Planner, Any]]:
    """A stream of one shard holding 3 records, read through a fault proxy on GetRecords
    (``seed``): the proxy, an open planner (``retry_limit`` 0, memory checkpoints) and the
    shard's first read plan, for a record that fails a task alone."""
    create_stream(moto_client, stream, 1)
    put_records(moto_client, stream, [(f"k{i}", f"r{i}|x".encode()) for i in range(3)])
    store = MemoryCheckpointStore("job")
    with FaultProxy(moto_server.endpoint_url, seed=seed, operations=["GetRecords"]) as px:
        sp = reader(px.endpoint_url, stream, tmp_path, store, retry_limit=0)
        (plan,) = sp.plan(10_000)
        yield px, sp, plan


def test_a_read_task_processes_at_most_the_window_in_user_records(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 1)
    put_records(moto_client, unique_name, [aggregate(f"g{g}", 100) for g in range(6)])
    store = MemoryCheckpointStore("job")
    sp = reader(moto_server.endpoint_url, unique_name, tmp_path, store, max_in_flight=50)
    tasks = run_tasks(sp, want=600)
    sp.spout.checkpoint(force=True)
    sp.spout.close()
    assert max(len(t) for t in tasks) <= 50
    flat = [i for t in tasks for i in t]
    assert flat == [f"g{g}.{u}" for g in range(6) for u in range(100)]
    cp = store.load(unique_name)[SHARD]
    assert (cp.sub_sequence_number, cp.sequence_number is not None) == (99, True)


@pytest.mark.parametrize("max_in_flight", [4, 1])
def test_a_window_full_at_the_head_of_an_aggregate_reads_on(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path, max_in_flight: int
) -> None:
    create_stream(moto_client, unique_name, 1)
    plain = [(f"p{i}", f"p{i}|x".encode()) for i in range(3)]
    put_records(moto_client, unique_name, [*plain, aggregate("a", 4), ("q", b"q0|x")])
    store = MemoryCheckpointStore("job")
    sp = reader(moto_server.endpoint_url, unique_name, tmp_path, store, max_in_flight=max_in_flight)
    tasks = run_tasks(sp, want=8, timeout=15.0)
    sp.spout.checkpoint(force=True)
    sp.spout.close()
    assert [i for t in tasks for i in t] == ["p0", "p1", "p2", "a.0", "a.1", "a.2", "a.3", "q0"]
    assert max(len(t) for t in tasks) <= max_in_flight
    cp = store.load(unique_name)[SHARD]
    assert cp.sub_sequence_number == 0 and cp.sequence_number is not None


def test_an_empty_page_that_is_behind_is_not_the_tip(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """Real Kinesis answers empty pages while far behind (gaps, old data): a read task
    reads on through them, and is caught up only at an answer that is not behind.

    The read's deadline is not what this is about: at 5 calls a second, the five or six
    calls here take 0.8-1.0 s, and a 1 s deadline cut the read on a loaded machine (40
    of 60 records). It gets 10 s."""
    create_stream(moto_client, unique_name, 1)
    put_records(moto_client, unique_name, [(f"k{i}", f"r{i}|x".encode()) for i in range(60)])
    store = MemoryCheckpointStore("job")
    with FaultProxy(moto_server.endpoint_url, empty=0.5, seed=3, operations=["GetRecords"]) as px:
        sp = reader(
            px.endpoint_url, unique_name, tmp_path, store, records_per_call=20, batch_max_wait=10.0
        )
        plans = sp.plan(10_000)
        assert len(plans) == 1 and plans[0].limit >= 60
        res = run_plan(plans[0], settings_of(sp), lambda r: None, batch_id=1)
        assert px.injected.empty > 0
        sp.apply([res])
        sp.spout.close()
    assert len(res) == 60 and res.end is not None
    assert not res.end.caught_up or res.end.behind == 0


def test_the_record_that_fails_alone_is_fetched_past_an_expired_iterator(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """A read plan of one record killed its worker: its shard is quarantined, and its next
    plan fetches that record and fails it unprocessed. The fetch's iterator expired (a
    halving cycle outlasted it): re-opened and read. A fetch no read of which works
    leaves the shard in quarantine, its next plan fetching again."""
    with one_shard_walk(moto_server, moto_client, unique_name, tmp_path, seed=1) as (px, sp, plan):
        px.expire = 0.5  # seed 1: the first GetRecords expires, the second is answered
        assert sp.fail_alone(replace(plan, limit=1), "worker died") == []
        failed = fetch_read(sp)
        assert px.injected.expire == 1
        assert len(failed) == 1 and failed[0].startswith(f"{unique_name}/{SHARD}")
        (plan,) = sp.plan(10_000)  # the shard reads on after it
        assert plan.fetch is None and plan.position is not None
        assert plan.position.after is not None
        px.expire = 1.0
        assert sp.fail_alone(replace(plan, limit=1), "worker died") == []
        assert fetch_read(sp) == []  # nothing reached: still in quarantine
        px.expire = 0.0
        (rid,) = fetch_read(sp)  # re-opened after the last key read
        assert rid.startswith(f"{unique_name}/{SHARD}") and rid != failed[0]
        sp.spout.close()


def test_a_record_that_failed_a_task_alone_is_fetched_in_the_next_micro_batch(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """``fail_alone`` reads nothing in the loop's thread; the shard's next plan is a
    fetch of its record, in the same micro-batch as the other shard's read."""
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, [(f"k{i}", f"r{i}|x".encode()) for i in range(40)])
    store = MemoryCheckpointStore("job")
    with FaultProxy(moto_server.endpoint_url, operations=["GetRecords"]) as px:
        sp = reader(px.endpoint_url, unique_name, tmp_path, store, retry_limit=0)
        plans = sp.plan(10_000)
        assert len(plans) == 2
        lone, other = plans
        before = px.requests.get("GetRecords", 0)
        assert sp.fail_alone(replace(lone, limit=1), "worker died") == []
        assert px.requests.get("GetRecords", 0) == before  # nothing read in this thread
        fetch, read = sp.plan(10_000)
        assert (fetch.shard_id, fetch.fetch, fetch.limit) == (lone.shard_id, "worker died", 1)
        assert read.shard_id == other.shard_id and read.fetch is None
        results = run_plans([fetch, read], settings_of(sp), lambda r: None, 1)
        sp.apply(results)
        (res,) = [r for r in results if r.shard_id == lone.shard_id]
        assert len(res) == 1 and res.errors == {0: "worker died"}
        (again,) = [p for p in next_plans(sp) if p.shard_id == lone.shard_id]
        assert again.fetch is None and again.limit > 1  # it reads on at full size
        sp.spout.close()
    assert sp.spout.stats().dead_lettered == 1  # retry_limit 0: failed once, dead-lettered


def killer(r: Record) -> None:
    if r.data.startswith(b"kill"):
        os._exit(9)


def test_a_record_that_kills_the_sandbox_is_fetched_next_and_the_rest_read_on(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """The per-record style's sandbox ends a read just before a record that killed its
    child; the planner applies the records before it, quarantines the shard, fetches the
    record (failed: retry_limit 0, dead-lettered) and reads on after it."""
    create_stream(moto_client, unique_name, 1)
    items = [(f"k{i}", b"kill|x" if i == 4 else f"r{i}|x".encode()) for i in range(10)]
    put = put_records(moto_client, unique_name, items)
    store = MemoryCheckpointStore("job")
    sp = reader(moto_server.endpoint_url, unique_name, tmp_path, store, retry_limit=0)
    settings = settings_of(sp)
    box = Sandbox()
    try:
        (plan,) = sp.plan(10_000)
        (res,) = box.run([plan], settings, killer, 1)
        assert res.seqs == [seq for _, seq in put[:4]] and res.poisoned is not None
        sp.apply([res])
        (fetch,) = next_plans(sp)
        assert fetch.fetch == res.poisoned and fetch.limit == 1
        (fetched,) = box.run([fetch], settings, killer, 2)
        assert [r.sequence_number for r in fetched.failed.values()] == [put[4][1]]
        sp.apply([fetched])
        (rest,) = next_plans(sp)
        assert rest.fetch is None and rest.limit > 1
        (after,) = box.run([rest], settings, killer, 3)
        assert after.seqs == [seq for _, seq in put[5:]] and all(after.ok)
        sp.apply([after])
    finally:
        box._forget([])
        sp.spout.close()
    assert sp.spout.stats().dead_lettered == 1  # retry_limit 0: failed once, dead-lettered
    assert store.load(unique_name)[put[0][0]].sequence_number == put[-1][1]


@pytest.mark.parametrize("how", ["killed its worker", "hung"])
def test_a_record_that_fails_alone_behind_empty_pages_is_fetched_over_several_reads(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path, how: str
) -> None:
    """The record a plan of one record failed on sits behind empty pages (real Kinesis
    answers them over a gap in time): each fetch reads on from where the last one
    stopped until it reaches the record, and fails it; the shard then reads at full
    size. Only fetches are planned for the shard meanwhile."""
    with one_shard_walk(moto_server, moto_client, unique_name, tmp_path, seed=0) as (px, sp, plan):
        px.set_rates(empty=1.0)
        one = replace(plan, limit=1)
        failed = sp.hung(one, how) if how == "hung" else sp.fail_alone(one, how)
        assert failed == [] and px.injected.empty == 0  # nothing read yet
        assert fetch_read(sp) == [] and px.injected.empty > 0  # all empty: still quarantined
        reached = px.injected.empty
        assert fetch_read(sp) == [] and px.injected.empty > reached  # read on, not again
        px.set_rates(empty=0.9)  # seed 0: a few more empty pages, then the record
        rids = fetch_read(sp)
        deadline = time.monotonic() + 60
        while not rids:
            assert time.monotonic() < deadline, "the record was not reached within 60 s"
            rids = fetch_read(sp)
        px.clear_faults()
        assert len(rids) == 1 and rids[0].startswith(f"{unique_name}/{SHARD}")
        (plan,) = sp.plan(10_000)  # the shard reads on after it, at full size
        assert plan.limit > 1 and plan.fetch is None
        res = run_plan(plan, settings_of(sp), lambda r: None, batch_id=1)
        sp.apply([res])
        sp.spout.close()
    assert len(res) == 2
    assert sp.spout.stats().dead_lettered == 1  # retry_limit 0: failed once, dead-lettered


def test_a_running_retry_task_keeps_its_records_past_the_message_timeout(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """The message timeout does not fail (and, out of retries, dead-letter) records a
    running task holds; the task's own deadline covers a task that hangs."""
    create_stream(moto_client, unique_name, 1)
    put_records(moto_client, unique_name, [(f"k{i}", f"r{i}|x".encode()) for i in range(5)])
    now = [1000.0]
    store = MemoryCheckpointStore("job")
    sp = reader(
        moto_server.endpoint_url,
        unique_name,
        tmp_path,
        store,
        retry_limit=1,
        fast_retries=False,
        message_timeout=5.0,
        clock=lambda: now[0],
    )
    settings = settings_of(sp)

    def fail_r0(r: Record) -> None:
        if r.data.startswith(b"r0|"):
            raise ValueError("r0 fails once")

    (read,) = sp.plan(100)
    sp.apply([run_plan(read, settings, fail_r0, batch_id=1)])
    (retry,) = sp.plan(100)
    assert retry.is_retry and [r.data[:2] for r in retry.retries] == [b"r0"]
    now[0] += 60.0  # the retry task runs long
    sp.plan(100, busy={(unique_name, SHARD)})
    assert sp.spout.stats().dead_lettered == 0 and sp.spout.stats().failed == 1
    sp.apply([run_plan(retry, settings, lambda r: None, batch_id=2)])
    sp.spout.checkpoint(force=True)
    assert sp.spout.stats().in_flight == 0 and sp.spout.stats().dead_lettered == 0
    sp.spout.close()


def test_a_shard_in_a_running_job_does_not_wake_the_driver(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """While a job reads a shard, that shard's own poll time (due: it was just planned)
    must not make the driver's loop wake at once, over and over, until the job is back
    (a busy loop that cost 5 µs of driver CPU per record on a cluster)."""
    create_stream(moto_client, unique_name, 1)
    put_records(moto_client, unique_name, [("k", b"r0|x")])
    sp = reader(moto_server.endpoint_url, unique_name, tmp_path, MemoryCheckpointStore("job"))
    try:
        plans = sp.plan(100)
        assert [p.shard_id for p in plans] == [SHARD]
        assert sp.wake_in() == 0.0  # due: planned but not back
        assert sp.wake_in(busy={(unique_name, SHARD)}) >= 0.4  # the checkpoint, not the shard
    finally:
        sp.spout.close()


def backing_off_reader(
    moto_server: MotoServer, stream: str, tmp_path: Path, now: list[float]
) -> Planner:
    """A planner on ``now[0]`` as its clock whose idle shards wait 1 s, doubling to 4 s."""
    return reader(
        moto_server.endpoint_url,
        stream,
        tmp_path,
        MemoryCheckpointStore("job"),
        clock=lambda: now[0],
        empty_shard_backoff=1.0,
        empty_shard_backoff_max=4.0,
        checkpoint_interval=60.0,
    )


def test_idle_shards_are_polled_less_often_and_poll_together(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """An empty shard waits twice as long after each empty read, up to
    ``empty_shard_backoff_max``; a shard waiting at its tip joins a micro-batch that runs
    anyway up to half its wait early (idle shards out of step poll in one job again), but
    never starts one early."""
    create_stream(moto_client, unique_name, 2)
    now = [100.0]
    sp = backing_off_reader(moto_server, unique_name, tmp_path, now)
    settings = settings_of(sp)

    def read(plans: list[Any]) -> None:
        sp.apply([run_plan(p, settings, lambda r: None, batch_id=1) for p in plans])

    try:
        waits = []
        for _ in range(4):
            plans = sp.plan(100)
            assert len(plans) == 2, plans
            read(plans)
            waits.append(sp.wake_in())
            now[0] += waits[-1]
        assert waits == pytest.approx([1.0, 2.0, 4.0, 4.0], abs=0.01)
        # out of step: one shard read now, the other 1.5 s later
        first, second = sp.plan(100)
        read([first])
        now[0] += 1.5
        read([second])
        assert sp.plan(100) == []  # nobody due: no early job
        now[0] += 2.5  # the first is due; the second (due in 1.5 s, half its wait is 2) joins
        assert {p.shard_id for p in sp.plan(100)} == {first.shard_id, second.shard_id}
    finally:
        sp.spout.close()


def test_records_read_up_to_a_limit_reset_an_idle_shards_backoff(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """A quiet shard's wait has grown to ``empty_shard_backoff_max``; records arrive and
    are read in reads that stop at their limit (not at the tip). They reset the wait:
    the next empty answer waits ``empty_shard_backoff`` again, as with driver reads."""
    create_stream(moto_client, unique_name, 1)
    now = [100.0]
    sp = backing_off_reader(moto_server, unique_name, tmp_path, now)
    settings = settings_of(sp)

    def read(limit: int) -> Any:
        (plan,) = sp.plan(limit)
        (res,) = [run_plan(plan, settings, lambda r: None, batch_id=1)]
        sp.apply([res])
        return res

    try:
        waits = []
        for _ in range(3):
            read(10)
            waits.append(sp.wake_in())
            now[0] += waits[-1]
        assert waits == pytest.approx([1.0, 2.0, 4.0], abs=0.01)  # grown to its most
        put_records(moto_client, unique_name, [(f"k{i}", b"x") for i in range(20)])
        full = [read(10), read(10)]
        assert [len(r) for r in full] == [10, 10]
        assert not any(r.end.caught_up for r in full)  # each stopped at its limit
        empty = read(10)
        assert len(empty) == 0 and empty.end.caught_up
        assert sp.wake_in() == pytest.approx(1.0, abs=0.01)  # not 4: records reset it
    finally:
        sp.spout.close()


@pytest.mark.parametrize("threads", [4, 1])
def test_a_task_keeps_up_to_poll_threads_calls_in_flight_and_each_shard_in_order(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path, threads: int
) -> None:
    """One task of six shards: with ``poll_threads`` 4, several GetRecords calls are
    answered at once (never more than 4); with 1, one at a time. Either way every
    shard's records reach the function once, in shard order, and every read ends
    caught up at its shard's last record."""
    create_stream(moto_client, unique_name, 6)
    put = put_records(moto_client, unique_name, [(f"k{i}", f"r{i}|x".encode()) for i in range(300)])
    store = MemoryCheckpointStore("job")
    with FaultProxy(moto_server.endpoint_url) as px:
        sp = reader(px.endpoint_url, unique_name, tmp_path, store, poll_threads=threads)
        plans = sp.plan(10_000)
        assert len(plans) == 6
        seen: dict[str, list[int]] = {}
        settings = replace(settings_of(sp), read_seconds=30.0)
        results = run_plans(
            plans,
            settings,
            lambda r: seen.setdefault(r.shard_id, []).append(int(r.sequence_number)),
            1,
        )
        sp.apply(results)
        sp.spout.close()
    most = px.most_in_flight("GetRecords")
    assert (2 <= most <= 4) if threads == 4 else most == 1
    by_shard: dict[str, list[int]] = {}
    for shard, seq in put:
        by_shard.setdefault(shard, []).append(int(seq))
    assert seen == by_shard
    assert all(r.end and r.end.caught_up and len(r) == len(by_shard[r.shard_id]) for r in results)


def next_plans(sp: Planner, timeout: float = 30.0) -> list[ReadPlan]:
    """The next micro-batch's plans, once a shard is due (a read that found nothing, or
    only errors, waits its backoff)."""
    deadline = time.monotonic() + timeout
    while not (plans := sp.plan(10_000)):
        assert time.monotonic() < deadline, "no shard due"
        time.sleep(min(sp.wake_in(), 0.05))
    return plans


def fetch_read(sp: Planner) -> list[str]:
    """The quarantined shard's fetch plan, read and applied; the message ids it failed."""
    (plan,) = next_plans(sp)
    assert plan.fetch is not None and plan.limit == 1
    res = run_plan(plan, settings_of(sp), lambda r: None, batch_id=1)
    sp.apply([res])
    return [r.stream_message_id for r in res.failed.values()]
