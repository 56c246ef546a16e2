"""The Spark job with enhanced fan-out (``consumer = "efo"``) against LocalStack in host mode.

Each read task subscribes from its start position, takes events up to its limit, the
tip or its time budget, and returns its last key. Checkpoints stay sequence numbers, so
a job can switch between polling and enhanced fan-out.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_job_helpers import POISON, log_deliveries, read_deliveries
from test_executor_reads import checkpoints, last_per_shard, spy_results

from devkit.localstack import LocalStackServer
from kinesis_spout.deadletter import read_dead_letters
from kinesis_spout.spark import build_driver
from kinesis_spout.spark.loop import MicroBatchLoop
from kinesis_spout.testing.streams import create_stream, emulator_client, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]


def test_switching_polling_efo_polling_resumes_with_nothing_lost_or_repeated(
    spark: Any, localstack: LocalStackServer, job_config: Any, unique_name: str, tmp_path: Path
) -> None:
    """Four runs of one job on one stream: polling, enhanced fan-out (poison records
    retried and dead-lettered as usual, the consumer deregistered at the end), enhanced
    fan-out again (the consumer registered again), polling again. Each run reads exactly
    what was put since the last one, and checkpoints at every shard's last record."""
    client = emulator_client(localstack.endpoint_url)
    create_stream(client, unique_name, 2)
    deliveries = tmp_path / "deliveries"
    deliveries.mkdir()
    fn = log_deliveries(str(deliveries))
    base = {"endpoint_url": localstack.endpoint_url, "retry_limit": 1, "batch_size": 150}
    runs = [
        ("polling", {"consumer": "polling"}),
        # A LocalStack subscription can stay silent for over 1.5 s on a loaded machine (a CI
        # run stopped "idle" at 83 of 160): the enhanced fan-out runs wait 5 s for more.
        ("efo executors", {"consumer": "efo", "deregister_on_close": True, "stop_when_idle": 5.0}),
        ("efo again", {"consumer": "efo", "stop_when_idle": 5.0}),
        ("polling again", {"consumer": "polling"}),
    ]
    put_all: list[tuple[str, str]] = []
    poison_ids: set[str] = set()
    for i, (name, overrides) in enumerate(runs):
        items = make_payloads(160, 100, prefix=f"run{i}-")
        if name == "efo executors":
            for j in (5, 77):
                items[j] = (items[j][0], POISON + b"-%d" % j)
        put = put_records(client, unique_name, items)
        if name == "efo executors":
            poison_ids = {f"{put[j][0]}:{put[j][1]}" for j in (5, 77)}
        put_all += put
        cfg = job_config(**base, **overrides)
        driver = build_driver(cfg, fn, spark=spark, progress=None)
        results = spy_results(driver) if isinstance(driver, MicroBatchLoop) else None
        summary = driver.run()

        assert summary.ok + summary.dead_lettered == 160, name
        got = Counter((d.shard, d.seq) for d in read_deliveries(deliveries) if d.attempt == 1)
        assert got == Counter(put_all), name  # nothing lost, nothing read twice
        stored = checkpoints(cfg.checkpoint_store, unique_name, unique_name)
        assert {s: seq for s, (seq, _) in stored.items()} == last_per_shard(put_all), name
        if results is not None and name == "efo executors":
            assert isinstance(driver, MicroBatchLoop)
            assert all(pid != os.getpid() for _, pid in driver.planner.readers)  # executors
            ends = [r.end for r in results if r.end is not None]
            assert all(e.position is None or e.position.iterator is None for e in ends)
            assert sum(len(r) for r in results if r.end is not None) == 160
    dead = read_dead_letters(str(tmp_path / "dead-letter"))
    assert sorted(d["message_id"] for d in dead) == sorted(poison_ids)
    arn = client.describe_stream_summary(StreamName=unique_name)["StreamDescriptionSummary"]
    listed = client.list_stream_consumers(StreamARN=arn["StreamARN"])["Consumers"]
    names = [c["ConsumerName"] for c in listed]
    assert names == [unique_name]  # deregistered after run 2, registered again by run 3
