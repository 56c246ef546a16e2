"""Executor reads at scale: one Spark job per micro-batch, shards grouped into tasks.

Each test runs the executor-read loop in-process on the shared ``local[2]``
session against moto, and asks Spark itself (its status tracker) how many
jobs and tasks ran, so a loop that went back to a job per shard fails here.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_job_helpers import (
    HANG,
    hang_once,
    last_per_shard,
    log_deliveries,
    per_record_transform,
    read_deliveries,
)

from kinesis_spout.checkpoint import open_store
from kinesis_spout.spark import build_driver
from kinesis_spout.spark.loop import MicroBatchLoop
from kinesis_spout.testing.streams import create_stream, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]


def spread_items(n: int) -> list[tuple[str, bytes]]:
    """``n`` records with a partition key each, so every shard of a wide stream gets some."""
    return [(f"key-{i}", b"r%09d|" % i + b"x" * 60) for i in range(n)]


def stored_checkpoints(cfg: Any, stream: str) -> dict[str, str | None]:
    store = open_store(cfg.checkpoint_store, cfg.job_name)
    try:
        return {s: cp.sequence_number for s, cp in store.load(stream).items()}
    finally:
        store.close()


def tasks_of_job(spark: Any, driver: MicroBatchLoop, job: int) -> list[int]:
    """The task counts of the stages of micro-batch job ``job`` (its Spark job group)."""
    tracker = spark.sparkContext.statusTracker()
    counts = []
    for job_id in tracker.getJobIdsForGroup(driver.jobs.group(job)):
        info = tracker.getJobInfo(job_id)
        for stage in info.stageIds if info is not None else []:
            stage_info = tracker.getStageInfo(stage)
            if stage_info is not None:
                counts.append(stage_info.numTasks)
    return counts


def run_driver(cfg: Any, fn: Any, spark: Any) -> tuple[MicroBatchLoop, Any]:
    driver = build_driver(cfg, fn, spark=spark, progress=None)
    assert isinstance(driver, MicroBatchLoop)
    return driver, driver.run()


def test_one_spark_job_reads_every_shard_in_grouped_tasks(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 12)
    put = put_records(moto_client, unique_name, spread_items(600))
    deliveries = tmp_path / "deliveries"
    deliveries.mkdir()
    # A shard that caught up waits far longer than the idle stop (1.5 s), also on a loaded
    # machine (5 s failed once there: a second micro-batch before the stop).
    cfg = job_config(
        shards_per_task=4, batch_size=1000, empty_shard_backoff=30.0, empty_shard_backoff_max=30.0
    )
    driver, summary = run_driver(cfg, log_deliveries(str(deliveries)), spark)

    got = Counter((d.shard, d.seq) for d in read_deliveries(deliveries))
    assert set(got) == set(put) and max(got.values()) == 1
    assert summary.ok == 600
    # The first micro-batch read all 12 shards (each had less than its limit) in one
    # Spark job of 3 tasks; the shards then wait their backoff, past the idle stop.
    assert tasks_of_job(spark, driver, 1) == [3]
    assert driver.spark_jobs == driver.micro_batches == 1
    assert stored_checkpoints(cfg, unique_name) == last_per_shard(put)


def test_by_default_a_micro_batch_has_one_read_task_per_core(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    create_stream(moto_client, unique_name, 6)
    put = put_records(moto_client, unique_name, spread_items(120))
    cfg = job_config(batch_size=1000, empty_shard_backoff=5.0)
    driver, summary = run_driver(cfg, lambda r: None, spark)

    assert summary.ok == 120
    cores = spark.sparkContext.defaultParallelism
    assert tasks_of_job(spark, driver, 1) == [min(cores, 6)]
    assert stored_checkpoints(cfg, unique_name) == last_per_shard(put)


def test_128_shards_are_read_and_each_checkpointed_at_its_last_record(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    create_stream(moto_client, unique_name, 128)
    put = put_records(moto_client, unique_name, spread_items(5120))
    assert len({s for s, _ in put}) == 128  # every shard holds records
    cfg = job_config(batch_size=100, empty_shard_backoff=1.0, stop_when_idle=3.0)
    driver, summary = run_driver(cfg, lambda r: None, spark)

    assert summary.ok == 5120 and summary.failed == 0
    assert driver.spark_jobs == driver.micro_batches  # no job per shard, no re-runs
    assert driver.micro_batches < 128  # each job read many shards
    # The summary counts every micro-batch: those with records, and the polls that read
    # nothing (the job stops only after some of these, at stop_when_idle).
    assert summary.empty_batches >= 1
    assert summary.batches + summary.empty_batches == driver.micro_batches
    assert stored_checkpoints(cfg, unique_name) == last_per_shard(put)


def test_a_job_of_several_shards_past_its_deadline_runs_again_one_job_per_shard(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, tmp_path: Path
) -> None:
    """A transform that hangs in one shard of a grouped task: the job is given up and
    each of its shards runs again alone, so the others are not held and nothing is lost.
    (The per-record style fails a hanging record alone inside its task instead.)"""
    create_stream(moto_client, unique_name, 3)
    items = spread_items(90)
    items[40] = (items[40][0], HANG + b"-40")
    put = put_records(moto_client, unique_name, items)
    deliveries = tmp_path / "deliveries"
    deliveries.mkdir()
    marker = tmp_path / "hung"
    fn = per_record_transform(hang_once(str(marker), log_deliveries(str(deliveries))))
    cfg = job_config(task_timeout=5.0, shards_per_task=3, batch_size=1000)
    driver, summary = run_driver(cfg, fn, spark)

    assert marker.exists() and driver.abandoned >= 1
    assert tasks_of_job(spark, driver, 1) == [1]  # the three shards in one task
    got = Counter((d.shard, d.seq) for d in read_deliveries(deliveries))
    assert set(got) == set(put)  # nothing lost
    assert summary.ok == 90 and summary.failed == 0 and summary.dead_lettered == 0
    assert driver.micro_batches >= 4  # the given-up job, then one job per shard
    assert stored_checkpoints(cfg, unique_name) == last_per_shard(put)


def _shard_of(key: str, shards: int) -> int:
    """The shard of a stream of ``shards`` even shards that Kinesis puts partition key
    ``key`` in (it hashes a key with MD5 into its 128-bit key space)."""
    import hashlib

    return int.from_bytes(hashlib.md5(key.encode()).digest()) * shards >> 128


def _one_key_per_shard(shards: int) -> list[str]:
    """A partition key for each shard of a stream of ``shards`` even shards."""
    keys: dict[int, str] = {}
    for i in range(10_000):
        key = f"k{i}"
        keys.setdefault(_shard_of(key, shards), key)
        if len(keys) == shards:
            return [keys[s] for s in range(shards)]
    raise AssertionError("no key for some shard")


def test_a_task_that_starts_after_others_of_its_job_end_has_its_whole_task_timeout(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, tmp_path: Path
) -> None:
    """A micro-batch of eight one-record tasks on local[2]'s two task slots runs in four
    waves of 2 s. Its deadline (``task_timeout`` 3.5 s: a backstop of 2 x 3.5 s + the
    1 s read deadline, as the per-record style's sandbox times each record) counts from
    its tasks' latest start or end that Spark's status tracker shows, so no wave is given
    up. The old code counted from the job's first task seen started, and gave the job up
    during its last wave (every shard then ran again, a job of its own, and records were
    delivered twice).

    A job on another stream warms the Python workers first: a cold worker's start
    (seconds: its imports, its client) counts in its task's time."""
    warm = f"{unique_name}-warm"
    create_stream(moto_client, warm, 2)
    put_records(moto_client, warm, [(k, b"warm") for k in _one_key_per_shard(2)])
    (tmp_path / "warm").mkdir()
    warm_cfg = job_config(stream_name=warm, job_name=warm, shards_per_task=1)
    assert run_driver(warm_cfg, log_deliveries(str(tmp_path / "warm")), spark)[1].ok == 2

    create_stream(moto_client, unique_name, 8)
    put = put_records(moto_client, unique_name, [(k, b"slow") for k in _one_key_per_shard(8)])
    assert len({s for s, _ in put}) == 8
    deliveries = tmp_path / "deliveries"
    deliveries.mkdir()
    cfg = job_config(task_timeout=3.5, shards_per_task=1, stop_when_idle=2.0)
    fn = log_deliveries(str(deliveries), sleep_ms=2000)
    driver, summary = run_driver(cfg, fn, spark)

    assert tasks_of_job(spark, driver, 1) == [8]  # one job, a task per shard
    assert driver.abandoned == 0
    assert (summary.ok, summary.failed, summary.retried, summary.dead_lettered) == (8, 0, 0, 0)
    assert sorted((d.shard, d.seq) for d in read_deliveries(deliveries)) == sorted(put)
    assert stored_checkpoints(cfg, unique_name) == last_per_shard(put)


def test_a_transform_reads_and_processes_in_one_spark_job_and_skips_empty_polls(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    """While records flow, a DataFrame transform's micro-batch is one Spark job (the
    read ends come back with the statuses); once every shard sat at its tip with
    nothing read, a poll reads first and runs no transform on an empty batch."""
    from pyspark.sql import functions as F

    from kinesis_spout.spark import dataframe_transform

    create_stream(moto_client, unique_name, 6)
    put = put_records(moto_client, unique_name, spread_items(300))
    calls: list[int] = []

    def passes(df: Any) -> Any:
        calls.append(1)  # on the driver, once per micro-batch that processes
        return df.select("_row", F.lit(True).alias("status"))

    cfg = job_config(batch_size=1000, empty_shard_backoff=0.2, stop_when_idle=2.0)
    driver, summary = run_driver(cfg, dataframe_transform(passes), spark)

    assert summary.ok == 300 and summary.failed == 0
    tracker = spark.sparkContext.statusTracker()
    assert len(tracker.getJobIdsForGroup(driver.jobs.group(1))) == 1
    # Micro-batch 1 read everything (2 too, if a read was cut by its deadline); the next
    # read nothing after shards that had records (one job, an empty transform); every
    # later one was an idle poll: read only, no transform.
    assert 2 <= len(calls) < driver.micro_batches
    assert driver.spark_jobs == driver.micro_batches
    assert stored_checkpoints(cfg, unique_name) == last_per_shard(put)


def test_a_transforms_spark_job_count_includes_the_failed_payloads_job(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    """The driver's count of Spark jobs is Spark's own, also when records fail and their
    payloads are fetched from the persisted reads (one more job per micro-batch)."""
    from pyspark.sql import functions as F

    from kinesis_spout.spark import dataframe_transform

    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, spread_items(40))

    def fails_some(df: Any) -> Any:
        return df.select("_row", (F.col("_row") % 7 != 3).alias("status"))

    cfg = job_config(batch_size=1000, retry_limit=0, empty_shard_backoff=0.2, stop_when_idle=1.5)
    driver, summary = run_driver(cfg, dataframe_transform(fails_some), spark)

    assert summary.failed > 0
    tracker = spark.sparkContext.statusTracker()
    groups = range(1, driver.micro_batches + 1)
    assert driver.spark_jobs == sum(
        len(tracker.getJobIdsForGroup(driver.jobs.group(b))) for b in groups
    )


def _keys_of_first_shard(n: int) -> list[str]:
    """Partition keys that Kinesis hashes into the lower half of the key space (shard 0
    of a two-shard stream)."""
    keys = (f"k{i}" for i in range(10_000))
    return [k for k in keys if _shard_of(k, 2) == 0][:n]


def test_a_shard_due_while_no_micro_batch_may_start_does_not_spin_the_driver(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    """While a micro-batch runs and none may start beside it (it is not slow yet), an
    idle shard whose next poll comes due cannot be read, nor can the shard list be
    refreshed: the driver waits for the job, or a checkpoint, not for those. (It woke
    every 5 ms, about 200 times a second.)"""
    import time

    create_stream(moto_client, unique_name, 2)
    put = put_records(moto_client, unique_name, [(k, b"slow") for k in _keys_of_first_shard(6)])

    def slow(record: Any) -> None:
        time.sleep(0.4)  # a micro-batch of 2 records: about 1 s; the empty shard is due in 0.1

    cfg = job_config(
        batch_size=2, batch_max_wait=1.0, checkpoint_interval=1.0, shard_refresh_interval=0.3
    )
    driver = build_driver(cfg, slow, spark=spark, progress=None)
    assert isinstance(driver, MicroBatchLoop)
    step = driver._step
    blocked = 0  # steps taken while a micro-batch ran and no other could start

    def counting(pool: Any) -> None:
        nonlocal blocked
        if driver._started and not driver._may_start(driver.clock()):
            blocked += 1
        step(pool)

    driver._step = counting  # type: ignore[method-assign]
    summary = driver.run()

    assert summary.ok == 6
    assert stored_checkpoints(cfg, unique_name) == last_per_shard(put)
    # Each micro-batch: its end, a checkpoint or two and the 0.5 s cap; not one per 5 ms.
    assert blocked <= 8 * driver.micro_batches, (blocked, driver.micro_batches)


def test_a_micro_batch_waiting_for_busy_executors_counts_that_wait_in_its_seconds(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, tmp_path: Path
) -> None:
    """Another Spark job holds both of local[2]'s task slots for 3 s when the first
    micro-batch is submitted, so its tasks wait for them. Its progress line's seconds
    (and the summary's processing time) run from its submission to its line, the wait
    included. The old code counted from the last time the driver looked at the job's
    task_timeout clock while none of its tasks had started (that clock moves on at each
    look, so a job waiting for Spark is not taken for a hang): the wait was left out,
    and a batch's seconds depended on when the driver happened to look."""
    import threading
    import time

    create_stream(moto_client, unique_name, 2)
    put = put_records(moto_client, unique_name, spread_items(40))
    sc = spark.sparkContext
    errors: list[BaseException] = []
    holding = tmp_path / "holding"
    holding.mkdir()

    def hold(slot: int) -> None:  # on a Python worker: say so, then keep the slot
        (holding / str(slot)).write_text("")
        time.sleep(3.0)

    def hold_both_slots() -> None:
        try:
            sc.parallelize(range(2), 2).foreach(hold)
        except BaseException as exc:
            errors.append(exc)

    blocker = threading.Thread(target=hold_both_slots)
    blocker.start()
    # (Spark's status tracker may show no task running here: it writes a stage's counts
    # only when more than 100 ms passed since it last did, so task starts just after the
    # stage's submission show only at the stage's next event.)
    deadline = time.monotonic() + 60
    while len(list(holding.iterdir())) < 2:
        assert not errors, errors
        assert time.monotonic() < deadline, "the blocking job's tasks never ran"
        time.sleep(0.02)
    held_from = time.monotonic()

    reports: list[Any] = []
    cfg = job_config(batch_size=1000, task_timeout=60.0, stop_when_idle=1.0)
    driver = build_driver(cfg, lambda record: None, spark=spark, progress=reports.append)
    assert isinstance(driver, MicroBatchLoop)
    summary = driver.run()
    blocker.join(60)

    assert summary.ok == 40
    assert stored_checkpoints(cfg, unique_name) == last_per_shard(put)
    first = reports[0]
    assert first.ok > 0
    # The batch was submitted after the slots were taken and ran only once they were
    # free: at least the rest of the 3 s, minus the driver's start, went by in it.
    assert first.seconds >= 2.0, (first.seconds, time.monotonic() - held_from)
    assert summary.busy_seconds >= first.seconds
