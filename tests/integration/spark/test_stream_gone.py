"""A Spark job over several streams when one of them is deleted, or refused (access
denied, a disabled KMS key): that stream is let go or paused, never taken for a poison
record, and the others are read to their end. The planner's two interleavings are
driven in-process (moto, no Spark); the end-to-end runs use the shared Spark session."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kit import spout_config
from spark_job_helpers import log_stream_records, read_stream_records

from devkit.faultproxy import FaultProxy
from kinesis_spout.checkpoint import open_store
from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.config import SpoutConfig
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.metrics import InMemoryMetrics, MetricsCollector
from kinesis_spout.spark import build_driver
from kinesis_spout.spark.loop import MicroBatchLoop
from kinesis_spout.spark.plan import Planner, ReadPlan, ReadSettings
from kinesis_spout.spark.quarantine import Quarantine
from kinesis_spout.spark.task import run_plans
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration]


def planner(
    endpoint: str,
    streams: list[str],
    tmp_path: Path,
    metrics: MetricsCollector | None = None,
    **kw: Any,
) -> Planner:
    cfg = spout_config(
        streams=streams, endpoint_url=endpoint, dead_letter=str(tmp_path / "dead"), **kw
    )
    spout = KinesisSpout(
        cfg,
        store=MemoryCheckpointStore("job"),
        client=make_client(endpoint),
        read_here=False,
        job_lease=False,
        metrics=metrics or InMemoryMetrics(),
    )
    sp = Planner(spout, Quarantine())
    spout.open()
    return sp


def read_once(sp: Planner, plans: list[ReadPlan]) -> list[str]:
    """Run ``plans`` as one task and apply the results; the records' data read."""
    got: list[str] = []
    settings = sp.settings(ReadSettings.of(sp.spout.config))
    sp.apply(run_plans(plans, settings, lambda r: got.append(r.data.decode()), 1))
    return got


def drain(sp: Planner, want: int, timeout: float = 30.0) -> list[str]:
    """Plan, read and apply until ``want`` records were read."""
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while len(got) < want:
        assert time.monotonic() < deadline, f"read {len(got)} of {want}"
        plans = sp.plan(10_000)
        if not plans:
            time.sleep(min(sp.wake_in(), 0.05))
            continue
        got += read_once(sp, plans)
    return got


@pytest.fixture
def two_streams(moto_client: Any, unique_name: str) -> Iterator[tuple[str, str]]:
    live, doomed = f"{unique_name}-live", f"{unique_name}-doomed"
    for name in (live, doomed):
        create_stream(moto_client, name, 2)
        put_records(moto_client, name, make_payloads(20, 20, prefix=f"{name[-4:]}-"))
    yield live, doomed


def test_a_read_task_that_finds_its_stream_deleted_lets_it_go_and_the_other_reads_on(
    moto_server: Any,
    moto_client: Any,
    two_streams: tuple[str, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The read task meets the deleted stream before the driver's shard refresh does:
    its read ends with the error, the planner lets the stream go (WARNING, metric), and
    the next plans are the other stream's only. Nothing is isolated as poison."""
    live, doomed = two_streams
    sp = planner(moto_server.endpoint_url, [live, doomed], tmp_path, shard_refresh_interval=3600)
    try:
        assert len(drain(sp, 40)) == 40
        moto_client.delete_stream(StreamName=doomed)
        late = put_records(moto_client, live, make_payloads(30, 20, prefix="late-"))
        with caplog.at_level(logging.WARNING):
            got = drain(sp, len(late))
        assert sorted(g.split("|")[0] for g in got) == [f"late-{i:09d}" for i in range(30)]
        assert doomed in sp.spout.gone and live in sp.spout.streams.sets
        assert all(p.stream == live for p in sp.plan(10_000))
        assert any(doomed in r.message and "no longer read" in r.message for r in caplog.records)
        assert sp.quarantine.shards == frozenset()
    finally:
        sp.spout.close()
    assert sp.spout.stats().dead_lettered == 0


def test_a_result_of_a_stream_the_refresh_let_go_meanwhile_is_dropped(
    moto_server: Any, moto_client: Any, two_streams: tuple[str, str], tmp_path: Path
) -> None:
    """The driver's refresh meets the deleted stream while a task reading it runs: the
    stream is let go, and the task's result (a failed read) is dropped when it comes
    back; planning goes on over the other stream (the release before planned the
    let-go stream again and stopped the job with ``KinesisSpout: closed``)."""
    live, doomed = two_streams
    sp = planner(moto_server.endpoint_url, [live, doomed], tmp_path, shard_refresh_interval=0.2)
    try:
        drain(sp, 40)
        put_records(moto_client, doomed, make_payloads(5, 20, prefix="more-"))
        deadline = time.monotonic() + 30
        in_flight: list[ReadPlan] = []
        while not in_flight:  # a micro-batch with a read of doomed: it is left running
            assert time.monotonic() < deadline, "doomed never planned"
            plans = sp.plan(10_000)
            in_flight = [p for p in plans if p.stream == doomed]
            read_once(sp, [p for p in plans if p.stream != doomed])
            time.sleep(min(sp.wake_in(), 0.05))
        busy = {p.key for p in in_flight}
        moto_client.delete_stream(StreamName=doomed)
        while doomed not in sp.spout.gone:  # the refresh finds it gone
            assert time.monotonic() < deadline, "the refresh never found doomed gone"
            read_once(sp, sp.plan(10_000, busy=busy))
            time.sleep(0.05)
        assert read_once(sp, in_flight) == []  # its read failed; the result is dropped
        put_records(moto_client, live, make_payloads(10, 20, prefix="late-"))
        assert len(drain(sp, 10)) == 10
    finally:
        sp.spout.close()


@pytest.mark.parametrize("code", ["AccessDeniedException", "KMSDisabledException"])
def test_a_stream_refused_to_the_reader_pauses_and_the_other_is_read_to_its_end(
    moto_server: Any,
    moto_client: Any,
    two_streams: tuple[str, str],
    tmp_path: Path,
    code: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Reads of one stream refused (an IAM policy, a disabled KMS key): its shards wait
    a growing backoff with a WARNING naming the stream and a read-failure count, never
    isolated as poison; the other stream is read to its end; once allowed again, the
    refused stream is read from where it stopped, nothing lost."""
    live, doomed = two_streams
    with FaultProxy(moto_server.endpoint_url, operations=["GetRecords"]) as proxy:
        metrics = InMemoryMetrics()
        sp = planner(proxy.endpoint_url, [live, doomed], tmp_path, metrics=metrics)
        try:
            proxy.deny(doomed, code)
            with caplog.at_level(logging.WARNING):
                got = drain(sp, 20)
                late = put_records(moto_client, live, make_payloads(15, 20, prefix="late-"))
                got += drain(sp, len(late))
            assert sorted({g.split("-")[0] for g in got}) == ["late", "live"] and len(got) == 35
            assert any(doomed in r.message and code in r.message for r in caplog.records)
            assert metrics.count("read_failures") >= 1
            assert sp.quarantine.shards == frozenset()
            proxy.allow(doomed)
            back = drain(sp, 20, timeout=60)  # after its backoff
            assert sorted(g.split("|")[0] for g in back) == [f"omed-{i:09d}" for i in range(20)]
        finally:
            sp.spout.close()
    assert sp.spout.stats().dead_lettered == 0


# --- end to end: the job's loop on the shared Spark session ----------------------------


def job_config(endpoint: str, streams: list[str], tmp_path: Path, **kw: Any) -> SpoutConfig:
    return spout_config(
        under=tmp_path,
        streams=streams,
        job_name=streams[0],
        endpoint_url=endpoint,
        empty_shard_backoff=0.1,
        batch_max_wait=0.3,
        checkpoint_interval=0.5,
        **kw,
    )


class Producer(threading.Thread):
    """Puts ``per_second`` records into ``stream`` for ``seconds``; ``put`` holds them."""

    def __init__(self, client: Any, stream: str, per_second: int, seconds: float) -> None:
        super().__init__(daemon=True)
        self.client, self.stream = client, stream
        self.per_second, self.seconds = per_second, seconds
        self.put: list[tuple[str, str]] = []

    def run(self) -> None:
        end = time.monotonic() + self.seconds
        n = 0
        while time.monotonic() < end:
            items = make_payloads(self.per_second // 5, 20, prefix=f"p{n}-")
            self.put += put_records(self.client, self.stream, items)
            n += 1
            time.sleep(0.2)


def run_in_thread(driver: MicroBatchLoop) -> tuple[threading.Thread, list[BaseException | None]]:
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            driver.run()
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


@pytest.mark.spark
@pytest.mark.timeout(240)
@pytest.mark.parametrize("refresh", [0.2, 1.0, 3.0, 10.0, 3600.0])
def test_a_stream_deleted_while_a_producer_writes_to_another_loses_none_of_it(
    spark: Any,
    moto_server: Any,
    moto_client: Any,
    unique_name: str,
    tmp_path: Path,
    refresh: float,
) -> None:
    """The job reads ``live`` (a producer writes 20 records/s for 10 s) and ``doomed``
    (deleted 3 s in). Whichever side meets the deletion first (the shard refresh, every
    ``refresh`` seconds, or a read task), ``doomed`` is let go and every record of
    ``live`` is delivered; the job stops only by ``stop_when_idle``, once ``live`` is
    drained (the release before split the failing micro-batch again and again, then
    stopped as idle with ``live`` half read)."""
    live, doomed = f"{unique_name}-live", f"{unique_name}-doomed"
    for name in (live, doomed):
        create_stream(moto_client, name, 2)
    put_records(moto_client, doomed, make_payloads(40, 20))
    deliveries = tmp_path / "deliveries"
    deliveries.mkdir()
    cfg = job_config(
        moto_server.endpoint_url,
        [live, doomed],
        tmp_path,
        shard_refresh_interval=refresh,
        stop_when_idle=4.0,
    )
    driver = build_driver(cfg, log_stream_records(str(deliveries)), spark=spark, progress=None)
    assert isinstance(driver, MicroBatchLoop)
    producer = Producer(moto_client, live, 20, 10.0)
    producer.start()
    runner, outcome = run_in_thread(driver)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and runner.is_alive():
        time.sleep(0.05)
    moto_client.delete_stream(StreamName=doomed)
    producer.join()
    runner.join(timeout=180)
    assert not runner.is_alive() and outcome == [None], outcome
    assert "idle" in driver.summary(0.0).stopped_because
    got = {(shard, seq) for stream, shard, seq in read_stream_records(deliveries) if stream == live}
    assert got == set(producer.put)  # every record of live
    assert doomed in driver.spout.gone
    store = open_store(cfg.checkpoint_store, cfg.job_name)
    try:
        stored = {s: cp.sequence_number for s, cp in store.load(live).items()}
    finally:
        store.close()
    last: dict[str, str] = {}
    for shard, seq in producer.put:
        last[shard] = seq
    assert stored == last
