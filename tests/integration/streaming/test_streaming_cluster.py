"""The streaming source on a real standalone cluster (master and two 1-core
workers from PySpark's jars, loopback): records are read in two executor
processes, and a worker killed with SIGKILL mid-batch loses nothing: the tasks
Spark runs again return exactly the recorded ranges."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from streaming_helpers import Row, assert_exactly_once, fill

from devkit.cluster import StandaloneCluster, cluster_spark_conf
from devkit.faultproxy import FaultProxy
from kinesis_spout.spark.submit import job_environment
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(400)]

RECORDS = 1200


def test_reads_spread_over_executors_and_a_killed_worker_loses_nothing(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 4)
    expected = fill(moto_client, unique_name, RECORDS, "c")
    sink = tmp_path / "sink"
    sink.mkdir()
    with StandaloneCluster(workers=2) as cluster, FaultProxy(moto_server.endpoint_url) as proxy:
        conf = json.dumps(cluster_spark_conf(cluster) | {"spark.ui.enabled": "false"})
        log = (tmp_path / "child.log").open("wb")
        child = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("cluster_child.py")),
                conf,
                proxy.endpoint_url,
                unique_name,
                str(tmp_path / "ck"),
                str(sink),
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=job_environment(master=cluster.master_url),
        )
        try:
            deadline = time.monotonic() + 240
            while not (sink / "paused-1").exists():
                assert child.poll() is None, (tmp_path / "child.log").read_text()[-4000:]
                assert time.monotonic() < deadline, "the query never reached batch 1"
                time.sleep(0.2)
            fetched_before = proxy.records_returned
            killed = cluster.kill_worker(0)  # the worker and its executor, mid-batch
            assert killed
            (sink / "resume").touch()
            assert child.wait(240) == 0, (tmp_path / "child.log").read_text()[-4000:]
        finally:
            if child.poll() is None:
                child.kill()
        fetched = proxy.records_returned
    batches = {
        int(p.stem.split("-")[1]): [Row(*r) for r in json.loads(p.read_text())]
        for p in sink.glob("batch-*.json")
    }
    assert_exactly_once([r for rows in batches.values() for r in rows], expected)
    assert len(batches[1]) == int((sink / "paused-1").read_text())  # same range after the kill
    readers = set((sink / "readers").read_text().split())
    assert len({r.rsplit(":", 1)[1] for r in readers}) >= 2, readers  # two executor processes
    print(f"fetched {fetched_before} before the kill, {fetched} in all; readers {readers}")
    assert fetched >= RECORDS and fetched_before <= RECORDS, (fetched_before, fetched)
