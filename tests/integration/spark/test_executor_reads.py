"""Executor reads (``read_on = "executors"``) in local mode: moto, kinesis-mock, real Spark.

The executors read, de-aggregate and process; the driver gets statuses, the
payloads of failed records only, and each read's end.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_job_helpers import (
    HANG,
    KILLER,
    POISON,
    RETRY,
    RETRY_HANG,
    fail_then_hang,
    hang_always,
    hang_once,
    hold_task_slots,
    last_per_shard,
    log_deliveries,
    read_deliveries,
    spy_results,
)

from kinesis_spout.checkpoint import open_store
from kinesis_spout.deadletter import read_dead_letters
from kinesis_spout.spark import build_driver
from kinesis_spout.spark.loop import MicroBatchLoop
from kinesis_spout.testing.servers import KinesisMock
from kinesis_spout.testing.streams import (
    create_stream,
    emulator_client,
    make_payloads,
    put_records,
    wait_active,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]


def checkpoints(url: str, job: str, stream: str) -> dict[str, tuple[str | None, bool]]:
    store = open_store(url, job)
    try:
        return {s: (cp.sequence_number, cp.shard_end) for s, cp in store.load(stream).items()}
    finally:
        store.close()


@pytest.fixture
def deliveries(tmp_path: Path) -> Path:
    """The folder ``log_deliveries`` writes each delivery to."""
    d = tmp_path / "deliveries"
    d.mkdir()
    return d


def put_stream(
    client: Any, name: str, shards: int, n: int, size: int, special: dict[int, bytes]
) -> list[tuple[str, str]]:
    """A stream of ``n`` records of ``size`` bytes, ``special[i]`` the payload of record i."""
    create_stream(client, name, shards)
    items = make_payloads(n, size)
    for i, data in special.items():
        items[i] = (items[i][0], data)
    return put_records(client, name, items)


def assert_checkpointed_at_last(cfg: Any, stream: str, put: list[tuple[str, str]]) -> None:
    stored = checkpoints(cfg.checkpoint_store, stream, stream)
    assert {s: seq for s, (seq, _) in stored.items()} == last_per_shard(put)


def test_only_statuses_and_failed_payloads_reach_the_driver(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, deliveries: Path
) -> None:
    bad = set(range(7, 1200, 100))
    put = put_stream(moto_client, unique_name, 4, 1200, 150, {i: POISON + b"-%d" % i for i in bad})
    cfg = job_config(retry_limit=1, batch_size=400, max_in_flight=250)
    driver = build_driver(cfg, log_deliveries(str(deliveries)), spark=spark, progress=None)
    assert isinstance(driver, MicroBatchLoop)
    results = spy_results(driver)
    summary = driver.run()

    poison_ids = {f"{put[i][0]}:{put[i][1]}" for i in bad}
    payloads = [r for res in results for r in res.failed.values()]
    assert {r.message_id for r in payloads} == poison_ids  # nothing else came back
    # once each: the retry ran at once in the read task (fast retries), and the task
    # sent back the payload with its last delivery number
    assert len(payloads) == len(bad) and {r.attempt for r in payloads} == {2}
    assert all(r.data.startswith(POISON) for r in payloads)
    assert sum(len(res) for res in results if res.end is not None) == 1200
    assert all(pid != os.getpid() for _, pid in driver.planner.readers)  # read on executors
    got = Counter((s, q) for s, q, *_ in read_deliveries(deliveries))
    assert set(got) == set(put)
    assert all(n == 1 for k, n in got.items() if f"{k[0]}:{k[1]}" not in poison_ids)
    dead = read_dead_letters(cfg.dead_letter)
    assert sorted(d["message_id"] for d in dead) == sorted(poison_ids)
    assert summary.ok == 1200 - len(bad) and summary.dead_lettered == len(bad)
    assert_checkpointed_at_last(cfg, unique_name, put)


def test_a_record_that_kills_its_python_worker_is_isolated_and_dead_lettered(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, deliveries: Path
) -> None:
    put = put_stream(moto_client, unique_name, 2, 120, 100, {50: KILLER})
    cfg = job_config(retry_limit=1, batch_size=200)
    driver_of_run = build_driver(cfg, log_deliveries(str(deliveries)), spark=spark, progress=None)
    assert isinstance(driver_of_run, MicroBatchLoop)
    summary = driver_of_run.run()

    killer = f"{put[50][0]}:{put[50][1]}"
    dead = read_dead_letters(cfg.dead_letter)
    assert [d["message_id"] for d in dead] == [killer] and dead[0]["attempts"] == 2
    got = Counter((s, q) for s, q, *_ in read_deliveries(deliveries))
    assert got == {**dict.fromkeys(put, 1), put[50]: 2}  # the killer failed alone, twice;
    assert summary.ok == 119 and summary.dead_lettered == 1  # nothing else ran again
    assert driver_of_run.abandoned == 0
    assert_checkpointed_at_last(cfg, unique_name, put)


def test_a_record_that_hangs_every_time_is_failed_alone_in_its_task_and_dead_lettered(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, deliveries: Path
) -> None:
    """The per-record style runs in the task's sandbox: a call that runs past
    ``task_timeout`` is failed alone where it hangs, retried (hangs again) and
    dead-lettered; every other record is delivered once, no job is given up."""
    put = put_stream(moto_client, unique_name, 1, 30, 100, {10: HANG + b"-10"})
    cfg = job_config(task_timeout=2.0, batch_size=16, retry_limit=1)
    fn = hang_always(log_deliveries(str(deliveries)))
    driver, summary = run_for_at_most(150, cfg, fn, spark)

    hanging = f"{put[10][0]}:{put[10][1]}"
    dead = read_dead_letters(cfg.dead_letter)
    assert [d["message_id"] for d in dead] == [hanging] and dead[0]["attempts"] == 2
    got = Counter((s, q) for s, q, *_ in read_deliveries(deliveries))
    assert got == dict.fromkeys(set(put) - {put[10]}, 1)  # the hanging record never returned
    assert summary.ok == 29 and summary.dead_lettered == 1
    assert driver.abandoned == 0
    assert_checkpointed_at_last(cfg, unique_name, put)


def test_a_record_of_a_retry_task_that_hangs_is_failed_alone_and_the_others_run_once(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, deliveries: Path
) -> None:
    """Three records fail their first delivery and are retried together, in one retry
    task of the next micro-batch; on it, one of them hangs every time. It alone is
    failed, retried (hangs again) and dead-lettered; the other two are delivered ok,
    once each (the releases before ran record 3 again in a half of the given-up task)."""
    special = {3: RETRY + b"-3", 5: RETRY_HANG + b"-5", 8: RETRY + b"-8"}
    put = put_stream(moto_client, unique_name, 1, 12, 100, special)
    cfg = job_config(task_timeout=2.0, retry_limit=2, fast_retries=False, retry_backoff=0.0)
    fn = fail_then_hang(log_deliveries(str(deliveries)))
    driver, summary = run_for_at_most(150, cfg, fn, spark)

    hanging = f"{put[5][0]}:{put[5][1]}"
    dead = read_dead_letters(cfg.dead_letter)
    assert [d["message_id"] for d in dead] == [hanging] and dead[0]["attempts"] == 3
    got = Counter((s, q) for s, q, *_ in read_deliveries(deliveries))
    assert got == dict.fromkeys(set(put) - {put[5]}, 1)
    assert summary.ok == 11 and summary.dead_lettered == 1
    assert driver.abandoned == 0
    assert_checkpointed_at_last(cfg, unique_name, put)


def test_a_job_that_waits_for_spark_past_its_task_timeout_is_not_taken_for_a_hang(
    spark: Any,
    moto_client: Any,
    job_config: Any,
    unique_name: str,
    deliveries: Path,
    tmp_path: Path,
) -> None:
    """Another Spark job holds both of local[2]'s task slots: the micro-batch waits,
    past its task_timeout, with no task started. It is not given up (nor its record
    failed alone, which the function never saw): its time counts from its tasks."""
    put = put_stream(moto_client, unique_name, 1, 4, 100, {})
    blocker = hold_task_slots(spark.sparkContext, 2, 10, tmp_path / "slots")
    cfg = job_config(task_timeout=2.0, batch_size=1)  # the job's backstop: 5 s
    driver = build_driver(cfg, log_deliveries(str(deliveries)), spark=spark, progress=None)
    assert isinstance(driver, MicroBatchLoop)
    summary = driver.run()
    blocker.join()

    assert driver.abandoned == 0
    assert (summary.ok, summary.failed, summary.retried, summary.dead_lettered) == (4, 0, 0, 0)
    assert {(s, q) for s, q, *_ in read_deliveries(deliveries)} == set(put)
    assert_checkpointed_at_last(cfg, unique_name, put)


def test_a_job_whose_task_starts_late_has_its_whole_task_timeout_from_then(
    spark: Any,
    moto_client: Any,
    job_config: Any,
    unique_name: str,
    deliveries: Path,
    tmp_path: Path,
) -> None:
    """Another Spark job holds both task slots for 7 s; the micro-batch's one task, two
    records of 1.5 s, starts when they are free. The job's deadline (``task_timeout``
    2 s: a backstop of 2 x 2 s + the 1 s read deadline, as the sandbox times each
    record) counts from then. The old code restarted the clock only when it looked at
    the deadline (5 s after the job started, while it waited) and gave the task up 5 s
    later, after 3 s of running."""
    put = put_stream(moto_client, unique_name, 1, 2, 100, {})
    blocker = hold_task_slots(spark.sparkContext, 2, 7, tmp_path / "slots")
    cfg = job_config(task_timeout=2.0, batch_size=2, stop_when_idle=3.0)
    fn = log_deliveries(str(deliveries), sleep_ms=1500)
    driver = build_driver(cfg, fn, spark=spark, progress=None)
    assert isinstance(driver, MicroBatchLoop)
    summary = driver.run()
    blocker.join()

    assert driver.abandoned == 0
    assert (summary.ok, summary.failed, summary.retried, summary.dead_lettered) == (2, 0, 0, 0)
    assert sorted((d.seq, d.attempt) for d in read_deliveries(deliveries)) == [
        (seq, 1) for _, seq in put
    ]


def run_for_at_most(seconds: float, cfg: Any, fn: Any, spark: Any) -> tuple[MicroBatchLoop, Any]:
    """Run the job (progress lines shown) until it stops by itself, or stop it after
    ``seconds`` (the test's deadline); the driver and the summary."""
    driver = build_driver(cfg, fn, spark=spark)
    assert isinstance(driver, MicroBatchLoop)
    stop = threading.Timer(seconds, driver.request_stop, args=("the test's deadline",))
    stop.start()
    try:
        return driver, driver.run()
    finally:
        stop.cancel()


def run(cfg: Any, fn: Any, spark: Any) -> Any:
    driver = build_driver(cfg, fn, spark=spark, progress=None)
    assert isinstance(driver, MicroBatchLoop)
    return driver.run()


def test_process_partitions_spread_the_records_past_the_shards(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, deliveries: Path
) -> None:
    put = put_stream(
        moto_client, unique_name, 2, 600, 100, {i: POISON + b"-%d" % i for i in (10, 400)}
    )
    cfg = job_config(retry_limit=0, batch_size=600, process_partitions=5)
    summary = run(cfg, log_deliveries(str(deliveries)), spark)

    seen = read_deliveries(deliveries)
    assert {(s, q) for s, q, *_ in seen} == set(put) and len(seen) == 600
    assert len({d.partition for d in seen}) >= 3  # more partitions than shards
    assert summary.ok == 598 and summary.dead_lettered == 2
    assert_checkpointed_at_last(cfg, unique_name, put)


def test_a_split_shard_is_drained_before_its_children_are_read(
    spark: Any, kinesis_mock: KinesisMock, job_config: Any, unique_name: str, deliveries: Path
) -> None:
    client = emulator_client(kinesis_mock.endpoint_url)
    create_stream(client, unique_name, 1)
    before = put_records(client, unique_name, make_payloads(150, 80, prefix="a"))
    parent = "shardId-000000000000"
    shard = client.list_shards(StreamName=unique_name)["Shards"][0]
    lo, hi = (int(shard["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    client.split_shard(
        StreamName=unique_name, ShardToSplit=parent, NewStartingHashKey=str((lo + hi) // 2)
    )
    wait_active(client, unique_name)
    after = put_records(client, unique_name, make_payloads(150, 80, prefix="b"))
    cfg = job_config(endpoint_url=kinesis_mock.endpoint_url, batch_size=40, stop_when_idle=3.0)
    summary = run(cfg, log_deliveries(str(deliveries)), spark)

    seen = read_deliveries(deliveries)
    assert Counter((s, q) for s, q, *_ in seen) == Counter(before + after)
    last_parent = max(d.t for d in seen if d.shard == parent)
    first_child = min(d.t for d in seen if d.shard != parent)
    assert last_parent < first_child
    assert summary.ok == 300
    stored = checkpoints(cfg.checkpoint_store, unique_name, unique_name)
    assert stored[parent][1] is True
    children = {s: q for s, q in last_per_shard(after).items()}
    assert {s: seq for s, (seq, _) in stored.items() if s != parent} == children


def test_throttling_errors_and_expired_iterators_are_retried_inside_the_tasks(
    spark: Any,
    moto_server: Any,
    moto_client: Any,
    job_config: Any,
    unique_name: str,
    deliveries: Path,
) -> None:
    from devkit.faultproxy import FaultProxy

    put = put_stream(moto_client, unique_name, 2, 400, 60, {})
    with FaultProxy(moto_server.endpoint_url, seed=3, operations=["GetRecords"]) as proxy:
        proxy.set_rates(throttle=0.2, error=0.1, drop=0.05, expire=0.1)
        cfg = job_config(
            endpoint_url=proxy.endpoint_url,
            records_per_call=20,  # many calls per task, so every fault kind shows up
            max_calls_per_second=100,
            throttle_backoff=0.02,
            throttle_backoff_max=0.1,
            batch_size=100,
        )
        driver = build_driver(cfg, log_deliveries(str(deliveries)), spark=spark, progress=None)
        assert isinstance(driver, MicroBatchLoop)
        results = spy_results(driver)
        summary = driver.run()
        injected = proxy.injected
    assert injected.throttle and injected.error and injected.expire
    met = Counter(type(e).__name__ for r in results if r.end for e in r.end.errors)
    assert met["ThrottledError"] > 0 and met["ExpiredIteratorError"] > 0
    got = Counter((d.shard, d.seq) for d in read_deliveries(deliveries))
    assert set(got) == set(put) and max(got.values()) == 1  # no job failed, nothing twice
    assert summary.ok == 400 and summary.failed == 0
    assert_checkpointed_at_last(cfg, unique_name, put)


@pytest.mark.parametrize("at", [0, 20])
def test_a_worker_killing_record_in_the_only_shard_is_dead_lettered(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, deliveries: Path, at: int
) -> None:
    """One shard, so nothing else runs beside the record's tasks: at its head (as
    after a restart with it at the checkpoint) its first lone failure, and its
    retries (due at once) after it was found by a read, are still poison, not a
    systematic error that stops the job."""
    put = put_stream(moto_client, unique_name, 1, 40, 100, {at: KILLER})
    cfg = job_config(retry_limit=1, batch_size=200)
    summary = run(cfg, log_deliveries(str(deliveries)), spark)

    dead = read_dead_letters(cfg.dead_letter)
    assert [d["message_id"] for d in dead] == [f"{put[at][0]}:{put[at][1]}"]
    assert {(s, q) for s, q, *_ in read_deliveries(deliveries)} == set(put)
    assert summary.ok == 39 and summary.dead_lettered == 1
    assert_checkpointed_at_last(cfg, unique_name, put)


def test_a_record_that_hangs_once_is_failed_alone_and_delivered_on_its_retry(
    spark: Any,
    moto_client: Any,
    job_config: Any,
    unique_name: str,
    tmp_path: Path,
    deliveries: Path,
) -> None:
    put = put_stream(moto_client, unique_name, 1, 30, 100, {10: HANG + b"-10"})
    marker = tmp_path / "hung"
    cfg = job_config(task_timeout=2.0, batch_size=100)
    fn = hang_once(str(marker), log_deliveries(str(deliveries)))
    driver = build_driver(cfg, fn, spark=spark, progress=None)
    assert isinstance(driver, MicroBatchLoop)
    summary = driver.run()

    assert marker.exists() and driver.abandoned == 0
    got = Counter((s, q) for s, q, *_ in read_deliveries(deliveries))
    assert got == dict.fromkeys(put, 1)  # the hung call never returned; its retry did
    assert summary.ok == 30 and summary.failed == 1 and summary.dead_lettered == 0
    assert_checkpointed_at_last(cfg, unique_name, put)
