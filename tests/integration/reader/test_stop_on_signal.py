"""The README's spout loop stopped by SIGTERM or SIGINT (issue 26, hole 3).

A real subprocess runs the loop as the README shows it (``with StopSignals() as
stop, KinesisSpout(cfg) as spout``) on the moto server with a file store and a
60 s checkpoint interval, so nothing is checkpointed until it stops. The test
waits for the line saying every record was acked (with a deadline), sends the
signal, waits for the exit and reads the checkpoint: the last record's.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kinesis_spout.checkpoint.factory import open_store
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RECORDS = 45

LOOP = """
import sys
from kinesis_spout import KinesisSpout, StopSignals, load_config

acked = 0
with StopSignals() as stop, KinesisSpout(load_config(sys.argv[1])) as spout:
    while not stop.requested:
        batch = spout.next_batch(1000)
        if not batch:
            stop.sleep(spout.poll_delay())
            continue
        for record in batch:
            spout.ack(record)
            acked += 1
        print(f"acked {acked}", flush=True)
print(f"stopped by {stop.reason}", flush=True)
"""


def stdout_lines(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    """``proc``'s stdout lines, read by a thread (None at the end)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def wait_for_line(lines: queue.Queue[str | None], wanted: str, timeout: float) -> list[str]:
    """Lines up to the one equal to ``wanted``; fails at the deadline or when the
    process ends first."""
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            raise AssertionError(f"the loop ended before {wanted!r}: {seen}")
        seen.append(line)
        if line == wanted:
            return seen
    raise AssertionError(f"no {wanted!r} within {timeout}s: {seen}")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_readme_loop_with_a_final_checkpoint(
    moto_server: MotoServer, unique_name: str, tmp_path: Path, signum: signal.Signals
) -> None:
    client = emulator_client(moto_server.endpoint_url)
    create_stream(client, unique_name, 1)
    put_records(client, unique_name, make_payloads(RECORDS, 20))
    last = client.get_records(
        ShardIterator=client.get_shard_iterator(
            StreamName=unique_name, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"],
        Limit=1000,
    )["Records"][-1]["SequenceNumber"]
    config = tmp_path / "job.toml"
    config.write_text(
        f'stream_name = "{unique_name}"\njob_name = "{unique_name}"\n'
        f'endpoint_url = "{moto_server.endpoint_url}"\n'
        f'checkpoint_store = "file://{tmp_path / "checkpoints"}"\n'
        f'dead_letter = "{tmp_path / "dead"}"\n'
        "checkpoint_interval = 60\nempty_shard_backoff = 0.2\n"
    )
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = stdout_lines(proc)
    try:
        wait_for_line(lines, f"acked {RECORDS}", timeout=60)
        store = open_store(f"file://{tmp_path / 'checkpoints'}", unique_name)
        assert store.load(unique_name) == {}  # the 60 s interval has not passed
        proc.send_signal(signum)
        proc.wait(timeout=30)
        rest = wait_for_line(lines, f"stopped by {signum.name}", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.returncode == 0, err
    assert f"{signum.name}: stopping" in err, (rest, err)
    cps = store.load(unique_name)
    assert cps["shardId-000000000000"].sequence_number == last, cps
