"""The README's loop killed with SIGKILL mid-stream and started again, on each store (the
file store, a real ZooKeeper, DynamoDB on moto's server): nothing acked is lost, the
replay is at most ``max_in_flight`` records per shard, and the final checkpoints are
each shard's last record.

The loop is the README's (``StopSignals``, ``KinesisSpout`` in a ``with``, ack after the
work), its work being to append ``<shard> <sequence>`` to a file and fsync it; the
test waits for its "acked N" lines (with a deadline), kills it, starts it again (a
killed holder's job lease is taken over at once: its process is gone), waits until
every record is in the file, and stops it with SIGTERM (the final checkpoint).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kinesis_spout.checkpoint.factory import open_store
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SHARDS = 4
RECORDS = 1600
MAX_IN_FLIGHT = 40

LOOP = """
import os, sys
from kinesis_spout import KinesisSpout, StopSignals, load_config

done = open(sys.argv[2], "a")


def handle(record):
    done.write(f"{record.shard_id} {record.sequence_number}\\n")
    done.flush()
    os.fsync(done.fileno())


acked = 0
with StopSignals() as stop, KinesisSpout(load_config(sys.argv[1])) as spout:
    while not stop.requested:
        batch = spout.next_batch(25)
        if not batch:
            stop.sleep(spout.poll_delay())
            continue
        for record in batch:
            handle(record)
            spout.ack(record)
            acked += 1
        print(f"acked {acked}", flush=True)
"""


def run_until(
    script: Path, config: Path, done: Path, until: Callable[[int], bool], how: signal.Signals
) -> tuple[int, str]:
    """Run the loop until ``until(records done)``, then send ``how``; its exit code and
    stderr."""
    proc = subprocess.Popen(
        [sys.executable, str(script), str(config), str(done)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not until(lines(done)):
            if proc.poll() is not None:
                assert proc.stderr is not None
                raise AssertionError(f"the loop ended early: {proc.stderr.read()[-2000:]}")
            assert time.monotonic() < deadline, f"no progress: {lines(done)} records done"
            time.sleep(0.05)
        proc.send_signal(how)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    return code, proc.stderr.read()


def lines(done: Path) -> int:
    """The records done so far, each once (a replayed one is in the file twice)."""
    try:
        return len(set(done.read_bytes().splitlines()))
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("kind", ["file", "zk", "dynamodb"])
def test_the_readme_loop_killed_and_restarted_loses_nothing_and_replays_at_most_max_in_flight(
    moto_server: MotoServer,
    moto_client: Any,
    store_url_of: Callable[[str], str],
    unique_name: str,
    tmp_path: Path,
    kind: str,
) -> None:
    create_stream(moto_client, unique_name, SHARDS)
    put = put_records(moto_client, unique_name, make_payloads(RECORDS, 100))
    url = store_url_of(kind)
    config = tmp_path / "job.toml"
    config.write_text(
        f'stream_name = "{unique_name}"\njob_name = "{unique_name}"\n'
        f'endpoint_url = "{moto_server.endpoint_url}"\ncheckpoint_store = "{url}"\n'
        f'dead_letter = "{tmp_path / "dead"}"\nmax_in_flight = {MAX_IN_FLIGHT}\n'
        "checkpoint_interval = 0.2\nempty_shard_backoff = 0.05\n"
    )
    script, done = tmp_path / "loop.py", tmp_path / "done.txt"
    script.write_text(LOOP)

    run_until(script, config, done, lambda n: n >= RECORDS // 3, signal.SIGKILL)
    killed_at = lines(done)
    assert killed_at < RECORDS, "the kill came too late to be mid-stream"
    code, err = run_until(script, config, done, lambda n: n >= RECORDS, signal.SIGTERM)
    assert code == 0, err[-3000:]

    seen = Counter(tuple(line.split()) for line in done.read_text().splitlines())
    assert set(seen) == set(put), f"lost: {sorted(set(put) - set(seen))[:5]}"
    replayed = Counter(shard for (shard, _), n in seen.items() for _ in range(n - 1))
    assert all(n <= MAX_IN_FLIGHT for n in replayed.values()), replayed
    last: dict[str, int] = {}
    for shard, seq in put:
        last[shard] = max(last.get(shard, 0), int(seq))
    store = open_store(url, unique_name)
    try:
        stored = {s: cp.sequence_number for s, cp in store.load(unique_name).items()}
    finally:
        store.close()
    assert stored == {s: str(v) for s, v in last.items()}
