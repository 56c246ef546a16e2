"""Hole 4 end to end: two ``kinesis-spout run`` drivers with one job name.

A second driver of a running job used to read every shard too, race on the
checkpoints, and stop a shard for good when it lost a compare-and-set.  Now it
fails at once with an error naming the job and the holder, before Spark starts,
or waits for the holder with ``--wait-for-lease``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import spark_job_helpers

from devkit.holders import start_lease_holder
from kinesis_spout.checkpoint import open_store
from kinesis_spout.testing.processes import OutputLines
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]


def run_command(moto: MotoServer, stream: str, store_url: str, tmp: Path, *extra: str) -> list[str]:
    return [
        str(Path(sys.executable).with_name("kinesis-spout")),
        "run",
        "--process",
        f"{spark_job_helpers.__file__}:kill_test_job",
        "--spark-conf",
        "spark.ui.enabled=false",
        "--stream-name",
        stream,
        "--job-name",
        stream,
        "--endpoint-url",
        moto.endpoint_url,
        "--checkpoint-store",
        store_url,
        "--dead-letter",
        str(tmp / "dead-letter"),
        "--stop-when-idle",
        "1",
        "--empty-shard-backoff",
        "0.1",
        *extra,
    ]


def test_a_second_driver_of_a_running_job_stops_with_a_clear_error(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, make_payloads(50, 40))
    store_url = f"file://{tmp_path / 'checkpoints'}"
    holder = start_lease_holder(store_url, unique_name)  # the first driver
    try:
        started = time.monotonic()
        proc = subprocess.run(
            run_command(moto_server, unique_name, store_url, tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 3, proc.stdout + proc.stderr
        out = proc.stdout + proc.stderr  # spark-submit hands the driver's stderr to stdout
        assert f"job {unique_name!r} is already running" in out
        assert f":{holder.pid} since " in out
        assert time.monotonic() - started < 60
        store = open_store(store_url, unique_name)
        assert store.load(unique_name) == {}  # it read and wrote nothing
        store.close()
    finally:
        holder.kill()
        holder.wait()


def test_wait_for_lease_takes_over_when_the_first_driver_ends(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, make_payloads(50, 40))
    store_url = f"file://{tmp_path / 'checkpoints'}"
    holder = start_lease_holder(store_url, unique_name)
    proc = subprocess.Popen(
        run_command(moto_server, unique_name, store_url, tmp_path, "--wait-for-lease"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = OutputLines(proc, "the second driver")
    try:
        # The holder ends once the second driver has seen it and waits (it takes a while
        # to start under load), never after a fixed time.
        output.wait_for("waiting for the lease", timeout=180)
        assert proc.poll() is None  # still waiting for the lease
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        try:
            proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the second driver did not end 240s after the holder died:\n{output.text(0)}"
            ) from None
        out = output.text()
        assert proc.returncode == 0, out
        assert "waiting for the lease" in out
        store = open_store(store_url, unique_name)
        stored = store.load(unique_name)
        store.close()
        assert len(stored) == 2 and all(cp.sequence_number for cp in stored.values())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if holder.poll() is None:
            holder.kill()
            holder.wait()
