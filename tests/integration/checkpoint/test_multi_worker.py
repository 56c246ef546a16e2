"""Several worker processes on one stream, coordinated through ZooKeeper.

Three workers (``python -m kinesis_spout.coordination.worker``) share a
6-shard stream on the moto server; one is killed with SIGKILL mid-stream, a
fourth joins later, more records arrive. Every record must be processed, and
every duplicate must be one the killed worker had processed after its last
checkpoint (at least once, duplicates bounded by what it had not yet
checkpointed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kinesis_spout.checkpoint import open_store
from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore
from kinesis_spout.coordination.leases import ZooKeeperLeases
from kinesis_spout.records import Checkpoint
from kinesis_spout.testing.servers import MotoServer, ZooKeeperServer
from kinesis_spout.testing.streams import create_stream, emulator_client, make_payloads, put_records

pytestmark = pytest.mark.integration

SHARDS = 6


@dataclass(frozen=True)
class Line:
    worker: str
    shard: str
    sequence: int
    payload: str


class Workers:
    """Worker subprocesses writing to ``out``; logs in ``logs``."""

    def __init__(self, config: Path, out: Path, logs: Path) -> None:
        self.config = config
        self.out = out
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, worker_id: str, process_delay: float = 0.002) -> None:
        log = (self.logs / f"{worker_id}.log").open("wb")
        self.procs[worker_id] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kinesis_spout.coordination.worker",
                "--config",
                str(self.config),
                "--worker-id",
                worker_id,
                "--output",
                str(self.out),
                "--process-delay",
                str(process_delay),
                "--log-level",
                "INFO",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def lines(self) -> list[Line]:
        out = []
        for path in sorted(self.out.glob("*.records")):
            for text in path.read_text().splitlines():
                parts = text.split()
                if len(parts) == 4:  # a kill can cut the last line short
                    out.append(Line(path.stem, parts[0], int(parts[1]), parts[3]))
        return out

    def tail(self, worker_id: str) -> str:
        path = self.logs / f"{worker_id}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-40:])

    def check_alive(self) -> None:
        for wid, p in self.procs.items():
            if p.poll() is not None and p.returncode not in (0, -signal.SIGKILL):
                raise AssertionError(f"worker {wid} exited {p.returncode}:\n{self.tail(wid)}")

    def kill_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)


def wait_until(cond: Callable[[], bool], timeout: float, what: str, workers: Workers) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        workers.check_alive()
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {w}\n{workers.tail(w)}" for w in workers.procs)
            raise AssertionError(f"timed out waiting for {what}\n{tails}")
        time.sleep(0.1)


@pytest.fixture
def observer(zookeeper: ZooKeeperServer, unique_name: str) -> Iterator[ZooKeeperCheckpointStore]:
    store = open_store(zookeeper.url(f"/tests/{unique_name}"), "takeover-job", owner="observer")
    assert isinstance(store, ZooKeeperCheckpointStore)
    yield store
    store.close()


def test_three_workers_kill_one_then_one_joins(
    moto_server: MotoServer,
    zookeeper: ZooKeeperServer,
    observer: ZooKeeperCheckpointStore,
    unique_name: str,
    tmp_path: Path,
) -> None:
    client = emulator_client(moto_server.endpoint_url)
    stream = unique_name
    create_stream(client, stream, SHARDS)
    first = make_payloads(6000, size=64, prefix="a")
    put_records(client, stream, first)

    config = tmp_path / "worker.toml"
    config.write_text(
        f'stream_name = "{stream}"\n'
        f'endpoint_url = "{moto_server.endpoint_url}"\n'
        f'checkpoint_store = "{zookeeper.url(f"/tests/{unique_name}")}"\n'
        'job_name = "takeover-job"\n'
        "checkpoint_interval = 0.3\n"
        "zk_session_timeout = 4.0\n"
        "empty_shard_backoff = 0.2\n"
        "records_per_call = 200\n"
        "batch_size = 50\n"
        "shard_refresh_interval = 5.0\n"
        f'dead_letter = "{tmp_path / "dead"}"\n'
    )
    (tmp_path / "out").mkdir()
    (tmp_path / "logs").mkdir()
    workers = Workers(config, tmp_path / "out", tmp_path / "logs")
    leases = ZooKeeperLeases(observer, stream, "observer")

    def owners() -> dict[str, str]:
        return leases.holders()

    def balanced(names: set[str]) -> Callable[[], bool]:
        def check() -> bool:
            held = owners()
            per = Counter(held.values())
            return len(held) == SHARDS and set(per) == names and set(per.values()) == {2}

        return check

    try:
        for w in ("w1", "w2", "w3"):
            workers.start(w)
        # Each shard owned by exactly one worker, two each.
        wait_until(balanced({"w1", "w2", "w3"}), 60, "3 workers x 2 shards", workers)
        w3_shards = {s for s, w in owners().items() if w == "w3"}

        # Kill -9 w3 mid-stream.
        wait_until(
            lambda: sum(1 for ln in workers.lines() if ln.worker == "w3") >= 300,
            60,
            "w3 processing",
            workers,
        )
        os.kill(workers.procs["w3"].pid, signal.SIGKILL)
        workers.procs["w3"].wait(10)
        # Its session stays alive on the server for the session timeout, so nobody
        # can take over yet.
        assert set(owners().values()) == {"w1", "w2", "w3"}
        # A write w3 sent just before dying may still land, but not after its session
        # ends (ZooKeeper applies a session's requests before closing it): its last
        # checkpoints are the last ones read while it still held its leases (no new
        # owner can write before it holds the lease).
        at_kill: dict[str, Checkpoint] = {}
        reads = 0

        def w3_session_ended() -> bool:
            nonlocal at_kill, reads
            stored = {s: cp for s, cp in observer.load(stream).items() if s in w3_shards}
            if any(owners().get(s) == "w3" for s in w3_shards):
                at_kill, reads = stored, reads + 1
                return False
            return True

        wait_until(w3_session_ended, 60, "w3's session to end", workers)
        assert reads > 0, "w3's session ended before its checkpoints could be read"
        w3_lines = [ln for ln in workers.lines() if ln.worker == "w3"]
        w3_records = sum(1 for _, _ in first) // 3  # about: two shards of six
        assert len({ln.payload for ln in w3_lines}) < w3_records * 0.8, "w3 finished too early"

        # Takeover: after w3's session expires its shards go to w1 and w2.
        wait_until(
            lambda: Counter(owners().values()) == Counter({"w1": 3, "w2": 3}),
            60,
            "takeover of w3's shards",
            workers,
        )

        # A worker joins: it takes two shards, without loss.
        workers.start("w4")
        wait_until(balanced({"w1", "w2", "w4"}), 60, "w4 joining", workers)
        second = make_payloads(1200, size=64, prefix="b")
        put_records(client, stream, second)

        expected = {p.decode().split("|")[0] for _, p in first + second}
        wait_until(
            lambda: expected <= {ln.payload for ln in workers.lines()},
            120,
            "every record processed",
            workers,
        )
        # Graceful leave: each worker drains, flushes, deletes its leases.
        for w in ("w1", "w2", "w4"):
            workers.procs[w].send_signal(signal.SIGTERM)
        for w in ("w1", "w2", "w4"):
            assert workers.procs[w].wait(60) == 0, workers.tail(w)
        assert owners() == {}
        assert leases.workers() == []
    finally:
        workers.kill_all()

    lines = workers.lines()
    seen = Counter(ln.payload for ln in lines)
    assert set(seen) == expected  # nothing lost, nothing foreign
    assert any(ln.worker == "w4" and ln.payload.startswith("b") for ln in lines)
    assert any(ln.worker == "w4" for ln in lines)

    # Duplicates: only records w3 processed beyond its last checkpoint (acked
    # since, or still in flight), replayed by the new owner; one extra delivery each.
    # (Shards w3 read before the group settled were handed off cleanly: no duplicates.)
    beyond = {
        ln.payload
        for ln in w3_lines
        if ln.shard in w3_shards
        and (ln.shard not in at_kill or ln.sequence > int(at_kill[ln.shard].sequence_number or -1))
    }
    dups = {p: n for p, n in seen.items() if n > 1}
    print(
        f"records={len(seen)} lines={len(lines)} duplicates={len(dups)} "
        f"w3 processed={len(w3_lines)} beyond its checkpoint={len(beyond)} "
        f"per worker={Counter(ln.worker for ln in lines)}"
    )
    # Exactly those: the new owner resumed right after w3's last checkpoint.
    if set(dups) != beyond:
        detail = {
            shard: (
                at_kill[shard].sequence_number if shard in at_kill else None,
                sorted(ln.sequence for ln in w3_lines if ln.shard == shard)[-3:],
                sorted(ln.sequence for ln in lines if ln.shard == shard and ln.worker != "w3")[:3],
            )
            for shard in w3_shards
        }
        raise AssertionError(f"duplicates {len(dups)} != beyond {len(beyond)}: {detail}")
    assert all(n == 2 for n in dups.values())

    # Per shard, the final checkpoint covers the shard's last record.
    final = observer.load(stream)
    last: defaultdict[str, int] = defaultdict(int)
    for ln in lines:
        last[ln.shard] = max(last[ln.shard], ln.sequence)
    for shard, seq in last.items():
        assert int(final[shard].sequence_number or 0) == seq, shard
