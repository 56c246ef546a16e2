"""The scripts and files in localstack/ work as their README says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devkit.localstack import LOCALSTACK_VERSION
from kinesis_spout.config.load import load_config
from kinesis_spout.testing.processes import free_port_pair
from kinesis_spout.testing.servers import REPO_ROOT, free_port, port_open
from kinesis_spout.testing.streams import create_stream, emulator_client

pytestmark = pytest.mark.integration

LOCALSTACK_DIR = REPO_ROOT / "localstack"


def run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=env, cwd=REPO_ROOT, check=False
    )


def test_run_kinesis_mock_start_status_stop(tmp_path: Path, unique_name: str) -> None:
    script = str(LOCALSTACK_DIR / "run_kinesis_mock.sh")
    env = {**os.environ, "KINESIS_MOCK_RUN_DIR": str(tmp_path)}
    port = free_port_pair()  # the script puts the TLS port on the next one
    started = run([script, "start", str(port)], env)
    try:
        assert started.returncode == 0, started.stderr
        assert started.stdout.strip() == f"http://127.0.0.1:{port}"
        assert run([script, "status"], env).stdout.startswith("running: pid ")
        assert run([script, "start", str(port)], env).returncode == 1  # already running
        client = emulator_client(started.stdout.strip())
        create_stream(client, unique_name, shards=1)
        assert unique_name in client.list_streams()["StreamNames"]
    finally:
        stopped = run([script, "stop"], env)
    assert stopped.returncode == 0, stopped.stderr
    assert not port_open(port)
    assert run([script, "status"], env).returncode == 1


def test_run_localstack_start_status_stop(tmp_path: Path) -> None:
    script = [sys.executable, str(LOCALSTACK_DIR / "run_localstack.py")]
    port = free_port()
    where = ["--dir", str(tmp_path / "ls")]
    started = run([*script, "start", "--port", str(port), "--streams", "orders:3", *where])
    try:
        assert started.returncode == 0, started.stderr
        assert started.stdout.strip() == f"http://127.0.0.1:{port}"
        status = run([*script, "status", *where])
        assert status.stdout.strip().endswith(f"http://127.0.0.1:{port}")
        client = emulator_client(started.stdout.strip())
        summary = client.describe_stream_summary(StreamName="orders")["StreamDescriptionSummary"]
        assert (summary["StreamStatus"], summary["OpenShardCount"]) == ("ACTIVE", 3)
    finally:
        stopped = run([*script, "stop", *where])
    assert stopped.returncode == 0, stopped.stderr
    assert not port_open(port)
    assert run([*script, "status", *where]).returncode == 1


def test_job_file_and_compose_file_agree_with_the_code() -> None:
    job = load_config(LOCALSTACK_DIR / "job.toml", env={})
    assert (job.stream_name, job.endpoint_url) == ("demo", "http://127.0.0.1:4566")
    compose = (LOCALSTACK_DIR / "docker-compose.yml").read_text()
    assert f"image: localstack/localstack:{LOCALSTACK_VERSION}\n" in compose
    mounts = re.findall(r"- \./(\S+):/etc/localstack/init/ready\.d", compose)
    assert mounts and all((LOCALSTACK_DIR / m).is_dir() for m in mounts)
    assert "KINESIS_DEMO_STREAMS: ${KINESIS_DEMO_STREAMS:-demo:4}" in compose
