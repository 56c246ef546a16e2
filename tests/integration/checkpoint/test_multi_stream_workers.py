"""Two worker processes on two streams, coordinated through ZooKeeper (issue 24).

Two workers (``python -m kinesis_spout.coordination.worker``) read a config listing two
streams of 2 and 3 shards on the moto server: each holds shards of both streams, with
the leases keyed by stream as a single-stream worker's are. One is killed with SIGKILL
mid-stream: once its ZooKeeper session expires the other takes its shards of both
streams over and reads every record (each record's line, which names its stream, is in
some worker's output), and each stream's checkpoints end at its shards' last records.
A stream deleted while a worker reads it is let go: its leases and member node deleted,
the other stream read on.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_multi_worker import Workers, wait_until

from kinesis_spout.checkpoint import open_store
from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore
from kinesis_spout.config.load import load_config
from kinesis_spout.coordination.leases import ZooKeeperLeases
from kinesis_spout.coordination.worker import run_worker
from kinesis_spout.testing.servers import MotoServer, ZooKeeperServer
from kinesis_spout.testing.streams import create_stream, emulator_client, make_payloads, put_records

pytestmark = pytest.mark.integration

JOB = "multi-stream-job"


@dataclass(frozen=True)
class Line:
    worker: str
    stream: str
    shard: str
    sequence: int
    payload: str


def read_lines(out: Path) -> list[Line]:
    """Every complete line of every worker's output (a kill can cut the last one short)."""
    lines = []
    for path in sorted(out.glob("*.records")):
        for text in path.read_text().splitlines():
            parts = text.split()
            if len(parts) == 5:
                stream, shard, seq, _, payload = parts
                lines.append(Line(path.stem, stream, shard, int(seq), payload))
    return lines


@pytest.fixture
def observer(zookeeper: ZooKeeperServer, unique_name: str) -> Iterator[ZooKeeperCheckpointStore]:
    store = open_store(zookeeper.url(f"/tests/{unique_name}"), JOB, owner="observer")
    assert isinstance(store, ZooKeeperCheckpointStore)
    yield store
    store.close()


def write_config(path: Path, streams: list[str], moto: MotoServer, zk_url: str) -> None:
    path.write_text(
        f"streams = {json.dumps(streams)}\n"
        f'endpoint_url = "{moto.endpoint_url}"\n'
        f'checkpoint_store = "{zk_url}"\n'
        f'job_name = "{JOB}"\n'
        "checkpoint_interval = 0.3\n"
        "zk_session_timeout = 4.0\n"
        "empty_shard_backoff = 0.2\n"
        "records_per_call = 100\n"
        "batch_size = 40\n"
        "shard_refresh_interval = 5.0\n"
        f'dead_letter = "{path.parent / "dead"}"\n'
    )


def test_two_workers_share_two_streams_and_one_takes_over_both(
    moto_server: MotoServer,
    zookeeper: ZooKeeperServer,
    observer: ZooKeeperCheckpointStore,
    unique_name: str,
    tmp_path: Path,
) -> None:
    client = emulator_client(moto_server.endpoint_url)
    shards = {f"{unique_name}-a": 2, f"{unique_name}-b": 3}
    payloads = {}
    for (name, n), prefix in zip(shards.items(), "ab", strict=True):
        create_stream(client, name, n)
        payloads[name] = make_payloads(1000 * n, size=64, prefix=prefix)
        put_records(client, name, payloads[name])
    config = tmp_path / "worker.toml"
    write_config(config, list(shards), moto_server, zookeeper.url(f"/tests/{unique_name}"))
    (tmp_path / "out").mkdir()
    (tmp_path / "logs").mkdir()
    workers = Workers(config, tmp_path / "out", tmp_path / "logs")
    leases = {name: ZooKeeperLeases(observer, name, "observer") for name in shards}

    def owners() -> dict[tuple[str, str], str]:
        """``{(stream, shard): worker}`` of every lease held now."""
        return {(name, s): w for name, ls in leases.items() for s, w in ls.holders().items()}

    def both_hold_both_streams() -> bool:
        held = owners()
        per = {(stream, w) for (stream, _), w in held.items()}
        return len(held) == sum(shards.values()) and per == {
            (name, w) for name in shards for w in ("w1", "w2")
        }

    try:
        for w in ("w1", "w2"):
            workers.start(w, process_delay=0.003)
        wait_until(both_hold_both_streams, 60, "each worker holding shards of both", workers)
        assert sorted(Counter(owners().values()).values()) == [2, 3]  # balanced over both
        w2_shards = {key for key, w in owners().items() if w == "w2"}

        def w2_read_both() -> bool:
            lines = [ln for ln in read_lines(workers.out) if ln.worker == "w2"]
            return len(lines) >= 200 and {ln.stream for ln in lines} == set(shards)

        wait_until(w2_read_both, 60, "w2 processing both streams", workers)
        os.kill(workers.procs["w2"].pid, signal.SIGKILL)
        workers.procs["w2"].wait(10)
        w2_lines = [ln for ln in read_lines(workers.out) if ln.worker == "w2"]
        assert len(w2_lines) < sum(len(p) for p in payloads.values()) // 2, "w2 ended too soon"

        wait_until(
            lambda: set(owners().values()) == {"w1"} and len(owners()) == sum(shards.values()),
            60,
            "w1 taking w2's shards of both streams over",
            workers,
        )
        expected = {
            (name, p.decode().split("|")[0]) for name, ps in payloads.items() for _, p in ps
        }
        wait_until(
            lambda: expected <= {(ln.stream, ln.payload) for ln in read_lines(workers.out)},
            120,
            "every record of both streams processed",
            workers,
        )
        workers.procs["w1"].send_signal(signal.SIGTERM)
        assert workers.procs["w1"].wait(60) == 0, workers.tail("w1")
        assert owners() == {}
        assert all(ls.workers() == [] for ls in leases.values())
    finally:
        workers.kill_all()

    lines = read_lines(workers.out)
    seen = Counter((ln.stream, ln.payload) for ln in lines)
    assert set(seen) == expected  # nothing lost, nothing foreign
    assert any((ln.stream, ln.shard) in w2_shards for ln in lines if ln.worker == "w1")
    replayed = {key for key, n in seen.items() if n > 1}
    assert replayed <= {(ln.stream, ln.payload) for ln in w2_lines}  # only w2's in-flight
    for name in shards:
        final = observer.load(name)
        last: dict[str, int] = {}
        for ln in lines:
            if ln.stream == name:
                last[ln.shard] = max(last.get(ln.shard, 0), ln.sequence)
        assert len(last) == shards[name]
        for shard, seq in last.items():
            assert int(final[shard].sequence_number or 0) == seq, (name, shard)


def wait_for(cond: Callable[[], bool], timeout: float, what: str, alive: threading.Thread) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert alive.is_alive(), f"the worker stopped before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_deleted_stream_is_let_go_with_its_leases_and_the_other_read_on(
    moto_server: MotoServer,
    zookeeper: ZooKeeperServer,
    observer: ZooKeeperCheckpointStore,
    unique_name: str,
    tmp_path: Path,
) -> None:
    client = emulator_client(moto_server.endpoint_url)
    gone, kept = f"{unique_name}-gone", f"{unique_name}-kept"
    for name in (gone, kept):
        create_stream(client, name, 1)
        put_records(client, name, make_payloads(20, size=32, prefix="a"))
    path = tmp_path / "worker.toml"
    write_config(path, [gone, kept], moto_server, zookeeper.url(f"/tests/{unique_name}"))
    config = load_config(path, env={}, overrides={"worker_id": "w1"})
    leases = {name: ZooKeeperLeases(observer, name, "observer") for name in (gone, kept)}
    out = tmp_path / "out"
    stop = threading.Event()
    codes: list[int] = []
    worker = threading.Thread(
        target=lambda: codes.append(run_worker(config, out, stop=stop)), daemon=True
    )
    worker.start()
    try:
        wait_for(lambda: len(read_lines(out)) == 40, 60, "both streams read", worker)
        assert {name: ls.holders() for name, ls in leases.items()} == {
            gone: {"shardId-000000000000": "w1"},
            kept: {"shardId-000000000000": "w1"},
        }
        client.delete_stream(StreamName=gone)
        wait_for(
            lambda: leases[gone].holders() == {} and leases[gone].workers() == [],
            60,
            "the deleted stream's lease and member node deleted",
            worker,
        )
        assert leases[kept].holders() == {"shardId-000000000000": "w1"}
        put_records(client, kept, make_payloads(10, size=32, prefix="b"))
        wait_for(
            lambda: sum(ln.payload.startswith("b") for ln in read_lines(out)) == 10,
            60,
            "the other stream read on",
            worker,
        )
    finally:
        stop.set()
        worker.join(60)
    assert codes == [0]
    assert leases[kept].holders() == {} and leases[kept].workers() == []


def test_two_workers_restarted_together_on_a_recreated_stream_read_every_new_record(
    moto_server: MotoServer,
    zookeeper: ZooKeeperServer,
    observer: ZooKeeperCheckpointStore,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """Both workers claim the recreated stream's identity as they start, together: neither
    resumes its new shards from the old stream's positions."""
    client = emulator_client(moto_server.endpoint_url)
    name = unique_name
    create_stream(client, name, 2)
    put_records(client, name, make_payloads(200, size=32, prefix="old"))
    config = tmp_path / "worker.toml"
    write_config(config, [name], moto_server, zookeeper.url(f"/tests/{unique_name}"))
    (tmp_path / "out").mkdir()
    (tmp_path / "logs").mkdir()
    workers = Workers(config, tmp_path / "out", tmp_path / "logs")
    try:
        for w in ("w1", "w2"):
            workers.start(w)
        wait_until(lambda: len(workers.lines()) >= 200, 60, "the old stream read", workers)
        for w in ("w1", "w2"):
            workers.procs[w].send_signal(signal.SIGTERM)
        for w in ("w1", "w2"):
            assert workers.procs[w].wait(60) == 0, workers.tail(w)
        assert {int(cp.sequence_number or 0) for cp in observer.load(name).values()} != {0}

        client.delete_stream(StreamName=name)
        wait_until(lambda: name not in client.list_streams()["StreamNames"], 30, "deleted", workers)
        create_stream(client, name, 2)
        new = make_payloads(12, size=32, prefix="new")  # fewer: the old positions are past
        put_records(client, name, new)
        for w in ("w1", "w2"):  # together: each claims the new identity as it opens
            workers.start(w)
        want = {p.decode().split("|")[0] for _, p in new}
        wait_until(
            lambda: want <= {ln.payload for ln in workers.lines()},
            60,
            "every record of the new stream read",
            workers,
        )
    finally:
        workers.kill_all()
