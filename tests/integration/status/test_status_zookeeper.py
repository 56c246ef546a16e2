"""``kinesis-spout status`` on a ZooKeeper store: two worker processes sharing a stream
(``python -m kinesis_spout.coordination.worker``) on the moto server, a real ZooKeeper.

One run walks the life of the job: a store that does not exist yet, a store with no
checkpoints, two workers owning every shard between them and caught up, a job-lease
holder running and then killed, the workers gone. Every status run is read only:
the node tree is the same before and after.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from devkit.holders import start_lease_holder
from devkit.status import run_status, status_json, table_rows
from kinesis_spout.config.load import load_config
from kinesis_spout.status.command import gather
from kinesis_spout.status.model import StatusReport
from kinesis_spout.testing.servers import MotoServer, ZooKeeperServer
from kinesis_spout.testing.streams import create_stream, emulator_client, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SHARDS = 4


def last_sequences(placed: list[tuple[str, str]]) -> dict[str, str]:
    last: dict[str, str] = {}
    for shard, seq in placed:
        if shard not in last or int(seq) > int(last[shard]):
            last[shard] = seq
    return last


def tree(zk: KazooClient, path: str) -> dict[str, tuple[int, int]]:
    """Every node under ``path``: (mzxid, pzxid), which change with any write below."""
    out: dict[str, tuple[int, int]] = {}
    stat = zk.exists(path)
    if stat is None:
        return out
    out[path] = (stat.mzxid, stat.pzxid)
    for child in zk.get_children(path):
        out.update(tree(zk, f"{path}/{child}"))
    return out


def wait_for(
    what: str, cond: Callable[[], bool], procs: dict[str, subprocess.Popen[bytes]], logs: Path
) -> None:
    deadline = time.monotonic() + 120
    while not cond():
        dead = {w: p.returncode for w, p in procs.items() if p.poll() is not None}
        if dead or time.monotonic() > deadline:
            tails = {w: (logs / f"{w}.log").read_text()[-2000:] for w in procs}
            raise AssertionError(f"{what}: not reached (exited: {dead}); logs {tails}")
        time.sleep(0.3)


@pytest.fixture
def zk(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    client = KazooClient(zookeeper.hosts)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


def start_worker(config: Path, worker_id: str, out: Path) -> subprocess.Popen[bytes]:
    log = (out / f"{worker_id}.log").open("wb")
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kinesis_spout.coordination.worker",
                "--config",
                str(config),
                "--worker-id",
                worker_id,
                "--output",
                str(out),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    finally:
        log.close()


def test_status_of_two_zookeeper_workers_sharing_a_stream(
    moto_server: MotoServer,
    zookeeper: ZooKeeperServer,
    zk: KazooClient,
    unique_name: str,
    tmp_path: Path,
) -> None:
    stream = job = unique_name
    client = emulator_client(moto_server.endpoint_url)
    create_stream(client, stream, SHARDS)
    last = last_sequences(put_records(client, stream, make_payloads(200, 32)))
    assert len(last) == SHARDS
    root = f"/tests/{unique_name}"
    url = zookeeper.url(root)
    config = tmp_path / "job.toml"
    config.write_text(
        f'stream_name = "{stream}"\njob_name = "{job}"\n'
        f'endpoint_url = "{moto_server.endpoint_url}"\ncheckpoint_store = "{url}"\n'
        f'dead_letter = "{tmp_path / "dead-letter"}"\ncheckpoint_interval = 0.3\n'
        "zk_session_timeout = 4.0\nempty_shard_backoff = 0.2\n"
    )
    args = ("--config", str(config))

    # 1. The root node does not exist yet: every shard listed with no checkpoint, a note
    # naming the node, exit 0; and status does not create it.
    proc = run_status(*args, "--no-lag")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"ZooKeeper node {root} does not exist yet" in proc.stdout
    assert sorted(table_rows(proc.stdout)) == sorted(last)
    assert "Traceback" not in proc.stderr
    assert zk.exists(root) is None

    # 2. The store exists, the job never ran: said so, every shard listed, all of it pending.
    zk.ensure_path(root)
    # This test's root, and /tests itself (a node made beside the root would show in its
    # pzxid); not the whole of /tests, which holds other tests' nodes, some behind ACLs.
    before = (tree(zk, root), zk.exists("/tests"))
    doc = status_json(*args)
    assert (tree(zk, root), zk.exists("/tests")) == before
    assert [s["shard_id"] for s in doc["shards"]] == sorted(last)
    assert f"no checkpoints yet for job {job!r}" in doc["notes"][0]
    assert doc["workers"] == [] and doc["job_lease"]["state"] == "free"
    assert all(s["checkpoint"] is None and s["lease"] is None for s in doc["shards"])
    assert all(s["lag"]["pending"] is True for s in doc["shards"])
    assert doc["summary"]["pending"] == SHARDS

    # 3. Two workers: each shard owned by one of them, every shard caught up.
    procs = {w: start_worker(config, w, tmp_path) for w in ("w1", "w2")}
    cfg = load_config(config)

    def settled() -> bool:
        report: StatusReport = gather(cfg)
        owners = {s.lease.owner for s in report.shards if s.lease}
        return (
            owners == {"w1", "w2"}
            and all(s.lease for s in report.shards)
            and all(
                s.checkpoint and s.checkpoint.sequence_number == last[s.shard_id]
                for s in report.shards
            )
            and report.summary.pending == 0
        )

    try:
        wait_for("both workers own shards and are caught up", settled, procs, tmp_path)
        doc = status_json(*args)
        owners = {s["shard_id"]: s["lease"]["owner"] for s in doc["shards"]}
        assert sorted(owners) == sorted(last) and set(owners.values()) == {"w1", "w2"}
        assert [w["worker_id"] for w in doc["workers"]] == ["w1", "w2"]
        pids = {w["worker_id"]: w["pid"] for w in doc["workers"]}
        assert pids == {w: p.pid for w, p in procs.items()}
        for s in doc["shards"]:
            assert s["state"] == "open"
            assert s["checkpoint"]["sequence"] == last[s["shard_id"]]
            assert s["lease"]["pid"] == pids[s["lease"]["owner"]]
            assert s["lease"]["age_seconds"] >= 0 and s["lease"]["epoch"] >= 1
            assert s["lag"] == {
                "pending": False,
                "millis_behind_latest": 0,
                "next_record_arrival": None,
                "next_record_age_seconds": None,
                "error": None,
            }
            assert s["dead_letters"] == 0
        assert doc["summary"]["unowned"] == [] and doc["job_lease"]["state"] == "free"
        assert doc["kinesis_calls"] == 2 + 2 * SHARDS  # describe, list, a probe of 2 per shard

        proc = run_status(*args)
        assert proc.returncode == 0, proc.stderr
        rows = table_rows(proc.stdout)
        assert sorted(rows) == sorted(last)
        for shard, cells in rows.items():
            assert cells[1:3] == ["open", owners[shard]] and "caught up" in " ".join(cells)
            assert cells[-1] == f"{last[shard]}:0"
        assert "workers: 2: w1 (" in proc.stdout and ", w2 (" in proc.stdout

        # 4. The workers leave: no shard has an owner; status wrote nothing.
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        for p in procs.values():
            assert p.wait(60) == 0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    before = tree(zk, root)
    doc = status_json(*args)
    assert tree(zk, root) == before
    assert doc["workers"] == [] and all(s["lease"] is None for s in doc["shards"])
    assert [s["checkpoint"]["sequence"] for s in doc["shards"]] == [last[s] for s in sorted(last)]

    # 5. A driver holds the job lease; then it is killed (its session not yet expired).
    holder = start_lease_holder(url, job)
    try:
        lease: dict[str, Any] = status_json(*args)["job_lease"]
        assert lease["state"] == "held" and lease["holder"].endswith(f":{holder.pid}")
        assert lease["where"] == f"{root}/{job}/@job-lease" and lease["holder_gone"] is False
        assert lease["age_seconds"] >= 0
        proc = run_status(*args)
        assert f"job lease: held by {lease['holder']} since " in proc.stdout
    finally:
        holder.kill()
        holder.wait()
    lease = status_json(*args)["job_lease"]
    assert lease["state"] == "free" or lease["holder_gone"] is True
