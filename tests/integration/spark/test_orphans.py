"""Hole 8: nothing of a job outlives its launcher, and no pid file is left behind.

``kinesis-spout run`` starts ``spark-submit`` in a session of its own (so a
Ctrl-C in the terminal reaches the job through the launcher, which forwards it
politely).  A ``kill -9`` of the launcher used to leave the JVM, the Python
driver and the PySpark workers running and processing: a restart then ran two
jobs on one checkpoint.  Each process of a job is found by a token in its
environment (inherited by spark-submit, the JVM, the driver and the workers).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import spark_job_helpers

from kinesis_spout.checkpoint import open_store
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]

TOKEN_ENV = "KSPOUT_TEST_JOB_TOKEN"


def job_pids(token: str) -> dict[int, str]:
    """Processes whose environment carries ``token``, with their command lines."""
    found: dict[int, str] = {}
    needle = f"{TOKEN_ENV}={token}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
                found[int(entry.name)] = cmd.decode(errors="replace")[:120]
        except OSError:
            continue
    return found


def start_job(moto: MotoServer, stream: str, tmp: Path, token: str) -> subprocess.Popen[bytes]:
    cmd = [
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
        f"file://{tmp / 'checkpoints'}",
        "--dead-letter",
        str(tmp / "dead-letter"),
        "--batch-size",
        "100",
        "--checkpoint-interval",
        "0.5",
        "--empty-shard-backoff",
        "0.1",
    ]
    log = (tmp / "job.log").open("wb")
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, TOKEN_ENV: token}
    )


def wait_until_reading(tmp: Path, stream: str, proc: subprocess.Popen[bytes]) -> None:
    store = open_store(f"file://{tmp / 'checkpoints'}", stream)
    deadline = time.monotonic() + 120
    try:
        while not store.load(stream):
            assert proc.poll() is None, (tmp / "job.log").read_text()
            assert time.monotonic() < deadline, (tmp / "job.log").read_text()
            time.sleep(0.3)
    finally:
        store.close()


def wait_gone(token: str, seconds: float) -> dict[int, str]:
    deadline = time.monotonic() + seconds
    left = job_pids(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = job_pids(token)
    return left


def pid_files_naming(pids: Iterable[int]) -> set[str]:
    """The job pid files (in the temp folder every job shares) that name one of ``pids``:
    other jobs running on the machine at the same time do not count."""
    wanted = {str(p) for p in pids}
    found = set()
    for path in Path(tempfile.gettempdir()).glob("kinesis-spout-job-*.pid"):
        with contextlib.suppress(OSError):
            if path.read_text().strip() in wanted:
                found.add(path.name)
    return found


def test_kill_9_of_the_launcher_takes_the_whole_job_down(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, make_payloads(20_000, 40))  # ~40 s of work
    token = uuid.uuid4().hex
    launcher = start_job(moto_server, unique_name, tmp_path, token)
    try:
        wait_until_reading(tmp_path, unique_name, launcher)
        running = job_pids(token)
        assert len(running) >= 3, running  # launcher, JVM, driver (and workers)
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        left = wait_gone(token, 60)
        assert not left, f"still running after the launcher died: {left}"
        assert not pid_files_naming(running)  # the driver's pid file went with it
    finally:
        for pid in job_pids(token):
            os.kill(pid, signal.SIGKILL)


def test_sigterm_to_the_driver_stops_the_job_with_a_final_checkpoint(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, make_payloads(20_000, 40))
    token = uuid.uuid4().hex
    launcher = start_job(moto_server, unique_name, tmp_path, token)
    try:
        wait_until_reading(tmp_path, unique_name, launcher)
        drivers = [p for p, cmd in job_pids(token).items() if "job.py" in cmd and "java" not in cmd]
        assert len(drivers) == 1, job_pids(token)
        os.kill(drivers[0], signal.SIGTERM)
        assert launcher.wait(timeout=90) == 0, (tmp_path / "job.log").read_text()
        assert not wait_gone(token, 30)
        log = (tmp_path / "job.log").read_text()
        assert "SIGTERM: finishing the current batch, then stopping" in log
        store = open_store(f"file://{tmp_path / 'checkpoints'}", unique_name)
        stored = store.load(unique_name)
        store.close()
        assert len(stored) == 2
    finally:
        for pid in job_pids(token):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("target", ["java", "worker_daemon"])
def test_sigterm_to_the_jvm_or_a_worker_stops_the_job_cleanly(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path, target: str
) -> None:
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, make_payloads(20_000, 40))
    token = uuid.uuid4().hex
    launcher = start_job(moto_server, unique_name, tmp_path, token)
    try:
        wait_until_reading(tmp_path, unique_name, launcher)
        deadline = time.monotonic() + 30
        pids: list[int] = []
        while not pids and time.monotonic() < deadline:
            pids = [p for p, cmd in job_pids(token).items() if target in cmd]
            time.sleep(0.2)
        assert pids, job_pids(token)
        os.kill(pids[0], signal.SIGTERM)
        code = launcher.wait(timeout=120)
        assert not wait_gone(token, 60), "a process of the job outlived the SIGTERM"
        log = (tmp_path / "job.log").read_text()
        # A JVM ended by SIGTERM exits 143 like any JVM; the driver stops cleanly all the same.
        assert code == (143 if target == "java" else 0), log
        assert "SIGTERM: finishing the current batch, then stopping" in log
        assert "interrupted" not in log and "Traceback" not in log, log
        store = open_store(f"file://{tmp_path / 'checkpoints'}", unique_name)
        stored = store.load(unique_name)
        store.close()
        assert len(stored) == 2
    finally:
        for pid in job_pids(token):
            os.kill(pid, signal.SIGKILL)


def test_a_job_on_a_stream_that_does_not_exist_fails_naming_it_and_leaves_nothing(
    moto_server: MotoServer, unique_name: str, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex
    launcher = start_job(moto_server, unique_name, tmp_path, token)
    try:
        code = launcher.wait(timeout=120)
        assert not wait_gone(token, 60), "a process of the job outlived its failure"
        log = (tmp_path / "job.log").read_text()
        assert code != 0, log
        assert "kinesis-spout job: failed: " in log and unique_name in log, log
        assert log.count("kinesis-spout job: failed: ") == 1, log
        assert "Traceback" not in log, log
    finally:
        for pid in job_pids(token):
            os.kill(pid, signal.SIGKILL)
