"""The DataFrame styles on the executors: a transform and a fan-out read where they run.

Real Spark (``local[2]``), moto over HTTP. The read tasks record each read's end
(first writer wins), so a partition computed again has the same records.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from spark_job_helpers import (
    POISON,
    failing_word_sink,
    frame_jobs,
    last_per_shard,
    not_poison,
    spy_results,
    words_and_places,
    words_with_a_bad_one,
)

from kinesis_spout.checkpoint import open_store
from kinesis_spout.config import InitialPosition
from kinesis_spout.deadletter import read_dead_letters
from kinesis_spout.examples.wordcount import (
    WordCountSink,
    expected_counts,
    is_poison,
    read_counts,
    sample_records,
    split_sentence,
)
from kinesis_spout.records import GetterPosition
from kinesis_spout.spark import build_driver, dataframe_transform, fan_out
from kinesis_spout.spark.loop import MicroBatchLoop
from kinesis_spout.spark.plan import ReadPlan, ReadSettings
from kinesis_spout.spark.process.fanout import derived_ids, to_signed
from kinesis_spout.spark.process.runner import CACHE_COMPRESSED, uncompressed_caches
from kinesis_spout.spark.process.sinks import read_parquet_dir
from kinesis_spout.spark.read.recorded import RecordTo
from kinesis_spout.spark.read.rows import RowSpace
from kinesis_spout.spark.read.stage import FRAME_SCHEMA, META, frame_reader
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]


LATEST = GetterPosition(None, None, True, InitialPosition.LATEST, None)
OLDEST = GetterPosition(None, None, True, InitialPosition.TRIM_HORIZON, None)


def checkpoints(cfg: Any, stream: str) -> dict[str, str | None]:
    store = open_store(cfg.checkpoint_store, cfg.job_name)
    try:
        return {s: cp.sequence_number for s, cp in store.load(stream).items()}
    finally:
        store.close()


def test_a_transform_reads_on_the_executors_and_they_write_its_sink(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, tmp_path: Path
) -> None:
    items = make_payloads(900, 120)
    bad = set(range(5, 900, 97))
    for i in bad:
        items[i] = (items[i][0], POISON + b"-%d" % i)
    create_stream(moto_client, unique_name, 4)
    put = put_records(moto_client, unique_name, items)
    out = tmp_path / "rows"
    cfg = job_config(retry_limit=1, batch_size=300, sink=f"parquet://{out}")
    driver = build_driver(cfg, dataframe_transform(not_poison), spark=spark, progress=None)
    assert isinstance(driver, MicroBatchLoop)
    results = spy_results(driver)
    summary = driver.run()

    poison_ids = {f"{put[i][0]}:{put[i][1]}" for i in bad}
    assert all(res.pid != os.getpid() for res in results)  # read on the executors
    payloads = [r for res in results for r in res.failed.values()]
    assert {r.message_id for r in payloads} == poison_ids  # only failed payloads came back
    assert all(r.data.startswith(POISON) for r in payloads)
    dead = read_dead_letters(cfg.dead_letter)
    assert sorted(d["message_id"] for d in dead) == sorted(poison_ids)
    assert {d["error"] for d in dead} == {"poison record"}
    rows = read_parquet_dir(out)
    assert rows is not None and rows.column_names == ["shardId", "sequenceNumber"]
    written = Counter(
        zip(
            rows.column("shardId").to_pylist(),
            rows.column("sequenceNumber").to_pylist(),
            strict=True,
        )
    )
    good = {p for i, p in enumerate(put) if i not in bad}
    assert set(written) == good and set(written.values()) == {1}  # each ok record once
    assert summary.ok == 900 - len(bad) and summary.dead_lettered == len(bad)
    assert checkpoints(cfg, unique_name) == last_per_shard(put)


def test_the_word_count_fan_out_reads_on_the_executors(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, tmp_path: Path
) -> None:
    items = sample_records(0, 600)
    create_stream(moto_client, unique_name, 3)
    put = put_records(moto_client, unique_name, items)
    counts = tmp_path / "counts"
    rows = tmp_path / "words"
    process = fan_out(split_sentence, "word string", [WordCountSink(counts)], name="wordcount")
    cfg = job_config(retry_limit=1, batch_size=250, sink=f"parquet://{rows}")
    session = spark.newSession()  # its own SQL settings: the job sets one
    assert session.conf.get(CACHE_COMPRESSED, None) is None
    driver = build_driver(cfg, process, spark=session, progress=None)
    assert isinstance(driver, MicroBatchLoop)
    summary = driver.run()

    assert session.conf.get(CACHE_COMPRESSED) == "false"  # its caches are not compressed
    assert read_counts(counts) == expected_counts(items)
    words = read_parquet_dir(rows)  # the configured sink: one more anchored sink
    assert words is not None
    assert Counter(words.column("word").to_pylist()) == expected_counts(items)
    poison_ids = {f"{put[i][0]}:{put[i][1]}" for i, (_, d) in enumerate(items) if is_poison(d)}
    dead = read_dead_letters(cfg.dead_letter)
    assert sorted(d["message_id"] for d in dead) == sorted(poison_ids)
    assert summary.ok == len(items) - len(poison_ids)
    assert checkpoints(cfg, unique_name) == last_per_shard(put)


class KeepDerived:
    """A fan-out sink that keeps what it was given (on the driver) and wrote it all."""

    name = "keep"

    def __init__(self) -> None:
        self.tables: list[Any] = []

    def __call__(self, derived: Any) -> None:
        self.tables.append(derived.toArrow())


def test_a_fan_out_s_sinks_get_its_derived_records_in_order_typed_as_declared(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    """The sinks get a row per derived record: ``_root`` and ``_id`` (as the acker's
    arithmetic derives them from the root), then the fields as the schema declares them,
    even one named like a record column (executor reads gave ``data`` the record's
    binary type before the emit stage kept the derived records in lists)."""
    items = [(f"k{i}", " ".join(f"w{i}x{j}" for j in range(i % 4)).encode()) for i in range(40)]
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, items)
    keep = KeepDerived()
    process = fan_out(words_and_places, "data string, n long", [keep], name="places")
    cfg = job_config(batch_size=100)
    summary = build_driver(cfg, process, spark=spark, progress=None).run()

    assert summary.ok == 40
    got = pa.concat_tables(keep.tables)
    assert got.schema.names == ["_root", "_id", "data", "n"]
    assert got.schema.field("data").type == pa.string()
    assert got.schema.field("n").type == pa.int64()
    by_root: dict[int, list[tuple[int, str, int]]] = {}
    for row in got.to_pylist():
        by_root.setdefault(row["_root"], []).append((row["_id"], row["data"], row["n"]))
    words = sorted(tuple(w for _, w, _ in rows) for rows in by_root.values())
    assert words == sorted(tuple(d.decode().split()) for _, d in items if d)
    for root, rows in by_root.items():
        assert [n for _, _, n in rows] == list(range(len(rows)))  # emit's order
        ids = derived_ids(np.array([root], dtype=np.int64).view(np.uint64), np.array([len(rows)]))
        assert [i for i, _, _ in rows] == to_signed(ids).tolist()


def test_a_per_record_job_leaves_the_session_s_sql_settings_alone(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    """A per-record function caches nothing: its job does not set the cache setting (its
    first ``spark.conf`` would create the SQL session state, a cost of its start-up)."""
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, make_payloads(40))
    session = spark.newSession()
    driver = build_driver(job_config(), lambda record: None, spark=session, progress=None)
    assert isinstance(driver, MicroBatchLoop)
    summary = driver.run()

    assert summary.ok == 40
    assert session.conf.get(CACHE_COMPRESSED, None) is None


@pytest.mark.parametrize("setting", ["true", "false"])
def test_the_session_s_own_cache_compression_is_kept(spark: Any, setting: str) -> None:
    session = spark.newSession()
    session.conf.set(CACHE_COMPRESSED, setting)
    uncompressed_caches(session)
    assert session.conf.get(CACHE_COMPRESSED) == setting


def test_a_fan_out_sink_that_fails_a_word_fails_its_sentences(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    items = [(f"k{i}", b"alpha beta" if i % 3 else b"alpha bad gamma") for i in range(60)]
    create_stream(moto_client, unique_name, 2)
    put = put_records(moto_client, unique_name, items)
    process = fan_out(words_with_a_bad_one, "word string", [failing_word_sink("bad")])
    cfg = job_config(retry_limit=1, batch_size=100)
    summary = build_driver(cfg, process, spark=spark, progress=None).run()

    failing = {f"{put[i][0]}:{put[i][1]}" for i in range(60) if i % 3 == 0}
    dead = read_dead_letters(cfg.dead_letter)
    assert sorted(d["message_id"] for d in dead) == sorted(failing)
    assert all("cannot store 'bad'" in d["error"] for d in dead)
    assert summary.ok == 40 and summary.dead_lettered == 20
    assert checkpoints(cfg, unique_name) == last_per_shard(put)


def test_a_read_computed_again_returns_the_same_records(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, tmp_path: Path
) -> None:
    """Spark computes the read partitions twice (no cache); records put in between
    are not in the second computation, which reads the recorded range again."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, make_payloads(40, 50))
    cfg = job_config()
    shards = [s["ShardId"] for s in moto_client.list_shards(StreamName=unique_name)["Shards"]]
    start = GetterPosition(None, None, True, InitialPosition.TRIM_HORIZON, None)
    plans = [ReadPlan(i, unique_name, s, start, limit=500) for i, s in enumerate(shards)]
    to = RecordTo(cfg.checkpoint_store, cfg.job_name, unique_name, "run1", 1)
    reader = frame_reader([[p] for p in plans], ReadSettings.of(cfg), to, RowSpace(plans).bases)
    n = len(plans)
    reads = spark.range(0, n, 1, n).mapInArrow(reader, from_arrow_schema(FRAME_SCHEMA))

    def keys() -> list[tuple[str, list[str]]]:
        table = reads.where(F.col(META).isNull()).select("shardId", "sequenceNumber").toArrow()
        got: dict[str, list[str]] = {}
        for shard, seq in zip(*(c.to_pylist() for c in table.columns), strict=True):
            got.setdefault(shard, []).append(seq)
        return sorted(got.items())

    first = keys()  # not persisted: every action computes the reads again
    assert sum(len(k) for _, k in first) > 0
    put_records(moto_client, unique_name, make_payloads(30, 50))  # the shards grow
    assert keys() == first
    ends = to.open()
    try:
        for shard, seqs in first:
            end = ends.get("run1", 1, shard)
            assert end is not None and end.count == len(seqs)
            assert end.position is not None and end.position.sequence == seqs[-1]
        ends.forget_before("run1", 2)
        with pytest.raises(Exception, match="leftover"):
            reads.collect()  # an attempt of a removed job records nothing
    finally:
        ends.close()


def test_a_shard_idle_at_its_tip_is_polled_without_the_transform_after_a_batch_without_it(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    """A shard that sat at its tip with nothing read is polled read-first (no transform
    on an empty batch), also when a micro-batch without it ran in between (its
    ``empty_shard_backoff`` kept it out while another shard read)."""
    from pyspark.sql import functions as F

    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, make_payloads(40, 50))
    cfg = job_config(batch_max_wait=10.0)  # a read's deadline: a loaded machine reaches the tip
    idle, busy = [s["ShardId"] for s in moto_client.list_shards(StreamName=unique_name)["Shards"]]
    calls: list[int] = []

    def passes(df: Any) -> Any:
        calls.append(1)  # on the driver, once per micro-batch that processes
        return df.select("_row", F.lit(True).alias("status"))

    frames, settings = frame_jobs(spark, cfg, unique_name, dataframe_transform(passes))
    try:
        (at_tip,), _ = frames.collect(
            [ReadPlan(1, unique_name, idle, LATEST, 500)], 1, settings, "r", 1
        )
        assert len(at_tip) == 0 and at_tip.end.caught_up  # a first read is read and processed
        (read,), _ = frames.collect(
            [ReadPlan(2, unique_name, busy, OLDEST, 500)], 1, settings, "r", 2
        )
        assert len(read) > 0 and len(calls) == 2  # the other shard's batch: transformed
        again = ReadPlan(3, unique_name, idle, at_tip.end.position, 500)
        (polled,), jobs = frames.collect([again], 1, settings, "r", 3)
        assert len(polled) == 0 and polled.end.caught_up
        assert len(calls) == 2 and jobs == 1  # read first, nothing to transform
    finally:
        frames.close()


def test_a_given_up_transform_job_stops_holding_back_the_removal_of_batch_ends(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    """A transform that does not return on the driver (its micro-batch past its
    deadline): the driver gives the job up and reads the shard again in a new job. The
    ends that job recorded go once it is applied, although the given-up job's thread
    still runs; then that thread returns, records nothing and is not applied."""
    import threading

    from pyspark.sql import functions as F

    create_stream(moto_client, unique_name, 1)
    put = put_records(moto_client, unique_name, make_payloads(30, 50))
    released = threading.Event()
    calls: list[int] = []

    def hangs_first(df: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # user code on the driver that does not return in time
            released.wait(60)  # the re-run's micro-batch applied (else the test fails below)
        return df.select("_row", F.lit(True).alias("status"))

    cfg = job_config(task_timeout=12.0, batch_size=100)
    floors: list[int] = []
    floor: list[Callable[[], int]] = []  # the run's stored floor, once the driver is built

    def progress(report: Any) -> None:
        if not floors:
            floors.append(floor[0]())
            released.set()

    driver = build_driver(cfg, dataframe_transform(hangs_first), spark=spark, progress=progress)
    assert isinstance(driver, MicroBatchLoop) and driver.jobs.frames is not None
    floor.append(functools.partial(driver.jobs.frames.stores[0].floor, driver.jobs.run_id))
    summary = driver.run()

    assert driver.abandoned >= 1 and released.is_set()  # more when a busy machine is slow
    # The given-up job has key 1: the ends of the later jobs go (the floor is past it),
    # not kept while its thread hangs (floor 1).
    assert floors[0] > 1
    assert summary.ok == 30 and summary.failed == 0
    assert checkpoints(cfg, unique_name) == last_per_shard(put)


def test_a_given_up_job_that_returns_late_does_not_change_how_the_next_poll_runs(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    """A job given up while its transform hangs on the driver returns only after later
    jobs read its shard again, to its tip. What that old job read (records) does not
    count: the shard stays at its tip, and its next poll is read-first, with no
    transform on an empty batch."""
    import threading

    from pyspark.sql import functions as F

    create_stream(moto_client, unique_name, 1)
    cfg = job_config()
    (shard,) = [s["ShardId"] for s in moto_client.list_shards(StreamName=unique_name)["Shards"]]
    hang, entered, released = [False], threading.Event(), threading.Event()
    calls: list[int] = []

    def passes(df: Any) -> Any:
        calls.append(1)  # on the driver, once per micro-batch that processes
        if hang[0]:
            hang[0] = False
            entered.set()
            released.wait(60)
        return df.select("_row", F.lit(True).alias("status"))

    frames, settings = frame_jobs(spark, cfg, unique_name, dataframe_transform(passes))
    late: list[Any] = []
    try:
        (tip,), _ = frames.collect(
            [ReadPlan(1, unique_name, shard, LATEST, 500)], 1, settings, "r", 1
        )
        assert len(tip) == 0 and tip.end.caught_up
        put_records(moto_client, unique_name, make_payloads(20, 50))
        hang[0] = True
        hung = threading.Thread(
            target=lambda: late.append(
                frames.collect(
                    [ReadPlan(2, unique_name, shard, tip.end.position, 500)], 1, settings, "r", 2
                )
            )
        )
        hung.start()
        assert entered.wait(120), "the transform of job 2 was never called"
        frames.give_up(2)  # as the driver does past its deadline
        (again,), _ = frames.collect(
            [ReadPlan(3, unique_name, shard, tip.end.position, 500)], 1, settings, "r", 3
        )
        assert len(again) == 20
        (empty,), _ = frames.collect(
            [ReadPlan(4, unique_name, shard, again.end.position, 500)], 1, settings, "r", 4
        )
        assert len(empty) == 0 and empty.end.caught_up
        released.set()
        hung.join(120)
        (old,), _ = late[0]  # it read the same 20 records, and returned
        assert len(old) == 20 and not hung.is_alive()
        before = len(calls)
        (polled,), jobs = frames.collect(
            [ReadPlan(5, unique_name, shard, empty.end.position, 500)], 1, settings, "r", 5
        )
        assert len(polled) == 0 and polled.end.caught_up
        assert len(calls) == before and jobs == 1  # read first, nothing to transform
    finally:
        released.set()
        frames.close()


class _ForgetFails:
    """A batch-end store whose removals fail (a ZooKeeper outage at that moment): the
    fault injected where the driver cleans up; the read tasks use the real store."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def forget_before(self, run: str, batch: int) -> int:
        raise OSError(f"store down while removing the ends of run {run} before {batch}")

    def close(self) -> None:
        self.store.close()


def test_a_store_error_while_removing_batch_ends_does_not_fail_the_job(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, caplog: Any
) -> None:
    """Removing the ends no job needs is cleanup: when the store fails it, the job's
    results still come back, and a warning says what was not removed."""
    import logging

    create_stream(moto_client, unique_name, 1)
    put_records(moto_client, unique_name, make_payloads(10, 50))
    cfg = job_config()
    (shard,) = [s["ShardId"] for s in moto_client.list_shards(StreamName=unique_name)["Shards"]]

    frames, settings = frame_jobs(
        spark, cfg, unique_name, dataframe_transform(not_poison), wrap=_ForgetFails
    )
    try:
        with caplog.at_level(logging.WARNING):
            (read,), _ = frames.collect(
                [ReadPlan(1, unique_name, shard, OLDEST, 500)], 1, settings, "r", 1
            )
        assert len(read) == 10 and all(read.ok)
        assert "removing batch ends of run r before job 2: store down" in caplog.text
    finally:
        frames.close()


def test_a_micro_batch_that_fails_before_its_spark_job_ends_its_key(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    """A fan-out whose schema uses a reserved name fails while its read is set up,
    before any Spark job: the error names the field, and the micro-batch's key ends,
    so it does not hold back the removal of later batch ends."""
    from kinesis_spout.spark.process.contract import ProcessingContractError

    create_stream(moto_client, unique_name, 1)
    cfg = job_config()
    (shard,) = [s["ShardId"] for s in moto_client.list_shards(StreamName=unique_name)["Shards"]]

    words = fan_out(split_sentence, "_root long", [WordCountSink("unused")])
    frames, settings = frame_jobs(spark, cfg, unique_name, words)
    try:
        with pytest.raises(ProcessingContractError, match="reserved names.*_root"):
            frames.collect([ReadPlan(1, unique_name, shard, OLDEST, 10)], 1, settings, "r", 1)
        assert frames.keys.floor() == 2  # key 1 ended: nothing runs
    finally:
        frames.close()
