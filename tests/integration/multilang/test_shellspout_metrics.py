"""The multilang process' Prometheus endpoint (``metrics_port``), scraped while Storm's
side (the test harness) drives it over pipes; and a taken port refused at start."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devkit.scrape import Scrape, wait_for_scrape
from kinesis_spout.multilang.testing import ShellSpoutParent
from kinesis_spout.testing.servers import MotoServer, free_port
from kinesis_spout.testing.streams import create_stream, emulator_client, make_payloads, put_records

pytestmark = pytest.mark.integration

Spawn = Callable[..., ShellSpoutParent]
RECORDS = "kinesis_spout_records_total"
STORM_CONF = {"topology.message.timeout.secs": 30}


def write_config(tmp_path: Path, stream: str, endpoint: str, port: int) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(
        f'stream_name = "{stream}"\njob_name = "{stream}"\nendpoint_url = "{endpoint}"\n'
        f'checkpoint_store = "file://{tmp_path / "checkpoints"}"\n'
        f'dead_letter = "{tmp_path / "dead"}"\n'
        "retry_limit = 1\ncheckpoint_interval = 0.2\nempty_shard_backoff = 0.05\n"
        f"max_calls_per_second = 50.0\nmetrics_port = {port}\n"
    )
    return path


@pytest.fixture
def stream(moto_server: MotoServer, unique_name: str) -> Any:
    client = emulator_client(moto_server.endpoint_url)
    create_stream(client, unique_name, shards=2)
    put_records(client, unique_name, make_payloads(24, 50, "a"))
    return client


def acked(n: int) -> Callable[[Scrape], bool]:
    return lambda s: s.sum(RECORDS, outcome="acked") == n


def test_the_multilang_process_serves_metrics_that_follow_storm_acks_and_fails(
    moto_server: MotoServer,
    stream: Any,
    unique_name: str,
    spawn: Spawn,
    pid_dir: Path,
    tmp_path: Path,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    child = spawn(write_config(tmp_path, unique_name, moto_server.endpoint_url, port), "-v")
    child.handshake(pid_dir, STORM_CONF)
    emits = child.next_until(24)
    victim = emits[0]["id"]
    for e in emits[1:]:
        child.ack(e["id"])
    first = wait_for_scrape(url, acked(23), timeout=30, what="23 acks")
    assert first.by("outcome", RECORDS) == {"acked": 23, "dead_lettered": 0, "expired": 0}
    assert first.sum("kinesis_spout_records_read_total") == 24

    child.fail(victim)  # retry_limit = 1: one more delivery, then the dead-letter sink
    (again,) = child.next_until(1)
    assert again["id"] == victim
    child.fail(victim)
    put_records(stream, unique_name, make_payloads(10, 50, "b"))
    for e in child.next_until(10):
        child.ack(e["id"])
    second = wait_for_scrape(url, acked(33), timeout=30, what="33 acks")
    before, after = first.by("outcome", RECORDS), second.by("outcome", RECORDS)
    assert all(after[k] >= v for k, v in before.items())
    assert after == {"acked": 33, "dead_lettered": 1, "expired": 0}  # each record done, once
    read = second.sum("kinesis_spout_records_read_total")
    retried = second.sum("kinesis_spout_retries_total")
    failed = second.sum("kinesis_spout_failures_total")
    assert (read, retried, failed) == (34, 1, 2)
    assert len(second.by("shard", "kinesis_spout_records_read_total")) == 2
    assert second.sum("kinesis_spout_get_records_duration_seconds_count") > 0

    child.close_stdin()
    assert child.wait() == 0
    # The adapter's own closing line agrees with the last scrape.
    m = re.search(r"exiting with 0: (\d+) emitted, (\d+) acked, (\d+) failed", child.stderr_text())
    assert m, child.stderr_text()[-2000:]
    assert int(m[1]) == read + retried
    assert (int(m[2]), int(m[3])) == (after["acked"], failed)


def test_a_taken_metrics_port_is_an_error_before_anything_is_read(
    moto_server: MotoServer,
    stream: Any,
    unique_name: str,
    spawn: Spawn,
    pid_dir: Path,
    tmp_path: Path,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        child = spawn(write_config(tmp_path, unique_name, moto_server.endpoint_url, port))
        child.handshake(pid_dir, STORM_CONF)
        error = child.read_error()
        assert child.wait() == 2
    assert f"invalid config metrics_port={port}: a free port: 127.0.0.1:{port}" in error
    # the job lease comes first (a copy of a running job is named by it), then the port
    left = [p for p in (tmp_path / "checkpoints").rglob("*") if p.is_file()]
    assert [(p.name, p.stat().st_size) for p in left] == [(".job.lock", 0)]  # released
