"""Executor reads on a real Spark standalone cluster (master + two 1-core workers on
loopback, from PySpark's jars), submitted with ``kinesis-spout run --master spark://``.

The session's cluster runs its executors' Python from a bare virtualenv (no kinesis_spout,
as a cluster where nothing was installed): a job stops at once with one line saying to
pass ``--ship-env``; with it, a job's virtualenv (kinesis-spout installed editable, with its
``spark`` and ``ship`` extras: :func:`~devkit.jobenv.job_virtualenv`) is packed and
shipped, and the executors read and process from their unpacked copy."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import spark_job_helpers
from spark_job_helpers import POISON, last_per_shard, read_deliveries

from devkit.cluster import StandaloneCluster, cluster_spark_conf
from devkit.jobenv import job_virtualenv
from kinesis_spout.checkpoint import open_store
from kinesis_spout.deadletter import read_dead_letters
from kinesis_spout.spark.launch.shipenv import ALIAS
from kinesis_spout.spark.process.sinks import read_parquet_dir
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(400)]

OWN_PYTHON = ("spark.master", "spark.pyspark.python", "spark.executorEnv.PYSPARK_PYTHON")
"""The cluster conf left out when the executors start the workers' own Python."""


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A cluster's default Python where nothing was installed: a bare virtualenv's."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    probe = subprocess.run(
        [str(python), "-c", "import kinesis_spout"], cwd=venv, capture_output=True, check=False
    )
    assert probe.returncode != 0, "the bare virtualenv imports kinesis_spout"
    return str(python)


@pytest.fixture(scope="module")
def job_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``kinesis-spout`` program of a job's own virtualenv (kinesis-spout editable)."""
    python = job_virtualenv(tmp_path_factory.mktemp("job-env") / "venv")
    return python.with_name("kinesis-spout")


def start_job(
    cluster: StandaloneCluster,
    moto: MotoServer,
    stream: str,
    tmp: Path,
    *extra: str,
    slow_ms: float = 0.0,
    process: str = "logged_job",
    peers: int = 0,
    workers_python: str | None = None,
    launcher: Path | None = None,
) -> subprocess.Popen[str]:
    """``kinesis-spout run`` on ``cluster``; ``workers_python``: the executors start that
    Python (as ``PYSPARK_PYTHON``), not this one, unless the job ships its own."""
    left_out = OWN_PYTHON if workers_python else OWN_PYTHON[:1]
    conf = [
        f"--spark-conf={k}={v}" for k, v in cluster_spark_conf(cluster).items() if k not in left_out
    ]
    cmd = [
        str(launcher or Path(sys.executable).with_name("kinesis-spout")),
        "run",
        "--master",
        cluster.master_url,
        "--process",
        f"{spark_job_helpers.__file__}:{process}",
        "--spark-conf=spark.ui.enabled=false",
        *conf,
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
        "--stop-when-idle",
        "3",
        "--empty-shard-backoff",
        "0.1",
        "--batch-max-wait",
        "0.3",
        "--checkpoint-interval",
        "0.5",
        "--retry-backoff",
        "0.05",
        *extra,
    ]
    (tmp / "deliveries").mkdir(exist_ok=True)
    env = os.environ | {
        "KSPOUT_TEST_DELIVERIES": str(tmp / "deliveries"),
        "KSPOUT_TEST_SLOW_MS": str(slow_ms),
        "KSPOUT_TEST_PEERS": str(peers),
    }
    if workers_python:
        env["PYSPARK_PYTHON"] = workers_python
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )


def poisoned(n: int, bad: set[int]) -> list[tuple[str, bytes]]:
    items = make_payloads(n, 120)
    for i in bad:
        items[i] = (items[i][0], POISON + b"-%d" % i)
    return items


class CheckpointWatch:
    """Reads the job's checkpoints every 0.1 s and remembers every position seen."""

    def __init__(self, url: str, job: str, stream: str) -> None:
        self.seen: dict[str, list[int]] = {}
        self._stop = threading.Event()
        self._args = (url, job, stream)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        url, job, stream = self._args
        store = open_store(url, job)
        try:
            while not self._stop.wait(0.1):
                for s, cp in store.load(stream).items():
                    if cp.sequence_number is not None:
                        self.seen.setdefault(s, []).append(int(cp.sequence_number))
        finally:
            store.close()

    def stop(self) -> dict[str, list[int]]:
        self._stop.set()
        self._thread.join(10)
        return self.seen


def test_without_ship_env_a_job_on_bare_workers_stops_with_one_line_saying_to_pass_it(
    spark_cluster: StandaloneCluster,
    moto_server: MotoServer,
    moto_client: Any,
    unique_name: str,
    tmp_path: Path,
    bare_python: str,
) -> None:
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, make_payloads(100, 80))
    proc = start_job(spark_cluster, moto_server, unique_name, tmp_path, workers_python=bare_python)
    out, _ = proc.communicate(timeout=300)

    assert proc.returncode == 1, out[-3000:]
    said = [line for line in out.splitlines() if line.startswith("kinesis-spout job:")]
    assert said == [
        f"kinesis-spout job: failed: the executors' Python ({bare_python}) cannot import "
        "kinesis_spout: pass --ship-env to kinesis-spout run (it ships this virtualenv), "
        "or install kinesis-spout there (docs/deploy.md)"
    ], out[-3000:]
    assert not any("split" in line for line in out.splitlines()), "the batch was split"
    assert os.listdir(tmp_path / "deliveries") == []


@pytest.mark.timeout(1000)
def test_with_ship_env_bare_workers_read_in_two_executors_and_every_record_is_done(
    spark_cluster: StandaloneCluster,
    moto_server: MotoServer,
    moto_client: Any,
    unique_name: str,
    tmp_path: Path,
    bare_python: str,
    job_env: Path,
) -> None:
    create_stream(moto_client, unique_name, 4)
    bad = {5, 333, 777}
    put = put_records(moto_client, unique_name, poisoned(1000, bad))
    # Each executor's first delivery waits for the other's: one executor finishing both
    # tasks of the only micro-batch while the other still starts its Python worker (a
    # busy machine) would leave nothing to show that both read.
    proc = start_job(
        spark_cluster,
        moto_server,
        unique_name,
        tmp_path,
        "--retry-limit",
        "1",
        "--ship-env",
        slow_ms=1,
        peers=2,
        workers_python=bare_python,
        launcher=job_env,
    )
    out, _ = proc.communicate(timeout=900)  # packing and unpacking the env on a busy machine
    assert proc.returncode == 0, out

    seen = read_deliveries(tmp_path / "deliveries")
    assert {(d.shard, d.seq) for d in seen} == set(put)
    assert len({d.executor for d in seen}) >= 2  # two executor processes read and processed
    # ... importing kinesis_spout from their unpacked copy of the shipped virtualenv
    where = {p.read_text() for p in (tmp_path / "deliveries").iterdir()}
    workers = spark_cluster.root.resolve()
    assert all(Path(w).resolve().is_relative_to(workers) for w in where), where
    assert all(f"/{ALIAS}/lib/" in w and "/site-packages/kinesis_spout/" in w for w in where)
    poison_ids = {f"{put[i][0]}:{put[i][1]}" for i in bad}
    dead = read_dead_letters(str(tmp_path / "dead-letter"))
    assert sorted(d["message_id"] for d in dead) == sorted(poison_ids)
    store = open_store(f"file://{tmp_path / 'checkpoints'}", unique_name)
    stored = {s: cp.sequence_number for s, cp in store.load(unique_name).items()}
    store.close()
    assert stored == last_per_shard(put)
    summary = next(line for line in out.splitlines() if line.startswith("stopped ("))
    assert "1000 done (ok 997, dead-lettered 3) | 1003 deliveries" in summary, summary


def test_a_worker_killed_mid_batch_loses_nothing_and_checkpoints_never_go_back(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 4)
    bad = {11, 900}
    put = put_records(moto_client, unique_name, poisoned(1600, bad))
    with StandaloneCluster(workers=2) as cluster:
        watch = CheckpointWatch(f"file://{tmp_path / 'checkpoints'}", unique_name, unique_name)
        proc = start_job(
            cluster,
            moto_server,
            unique_name,
            tmp_path,
            "--retry-limit",
            "1",
            "--batch-size",
            "400",
            slow_ms=4,
        )
        deliveries = tmp_path / "deliveries"
        deadline = time.monotonic() + 180
        while len(os.listdir(deliveries)) < 300 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[0]
            time.sleep(0.05)
        killed = cluster.kill_worker(0)  # mid-batch: its tasks are rescheduled on worker 1
        assert len(killed) >= 2  # the worker and its executor
        out, _ = proc.communicate(timeout=300)
        positions = watch.stop()
    assert proc.returncode == 0, out

    seen = read_deliveries(deliveries)
    assert {(d.shard, d.seq) for d in seen} == set(put)  # nothing lost
    poison_ids = {f"{put[i][0]}:{put[i][1]}" for i in bad}
    dead = read_dead_letters(str(tmp_path / "dead-letter"))
    assert sorted(d["message_id"] for d in dead) == sorted(poison_ids)  # exactly once each
    assert all(p == sorted(p) for p in positions.values())  # never backwards
    assert {s: str(p[-1]) for s, p in positions.items()} == last_per_shard(put)
    replays = Counter((d.shard, d.seq) for d in seen)
    assert sum(n - 1 for k, n in replays.items() if f"{k[0]}:{k[1]}" not in poison_ids) <= 4 * 400


@pytest.mark.parametrize("style", ["transform", "fan_out"])
def test_the_dataframe_styles_read_on_the_executors_and_survive_a_killed_worker(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path, style: str
) -> None:
    """A transform and a fan-out, each writing the configured parquet sink on the
    executors; a worker killed mid-batch: nothing lost, every ok record in the sink
    (at most once per delivery), dead letters exact, checkpoints never back."""
    create_stream(moto_client, unique_name, 4)
    bad = {7, 500}
    put = put_records(moto_client, unique_name, poisoned(1200, bad))
    sink = tmp_path / "sink"
    with StandaloneCluster(workers=2) as cluster:
        watch = CheckpointWatch(f"file://{tmp_path / 'checkpoints'}", unique_name, unique_name)
        proc = start_job(
            cluster,
            moto_server,
            unique_name,
            tmp_path,
            "--retry-limit",
            "1",
            "--batch-size",
            "300",
            "--sink",
            f"parquet://{sink}",
            slow_ms=4,
            process=f"logged_{style}_job",
            peers=2,
        )
        deliveries = tmp_path / "deliveries"
        deadline = time.monotonic() + 180
        while len(os.listdir(deliveries)) < 250 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[0]
            time.sleep(0.05)
        killed = cluster.kill_worker(0)
        assert len(killed) >= 2
        out, _ = proc.communicate(timeout=300)
        positions = watch.stop()
    assert proc.returncode == 0, out

    seen = read_deliveries(deliveries)
    assert {(d.shard, d.seq) for d in seen} == set(put)  # nothing lost
    assert len({d.executor for d in seen}) >= 2  # read and processed in both workers
    poison_ids = {f"{put[i][0]}:{put[i][1]}" for i in bad}
    dead = read_dead_letters(str(tmp_path / "dead-letter"))
    assert sorted(d["message_id"] for d in dead) == sorted(poison_ids)
    assert all(p == sorted(p) for p in positions.values())
    assert {s: str(p[-1]) for s, p in positions.items()} == last_per_shard(put)
    rows = read_parquet_dir(sink)
    assert rows is not None
    if style == "transform":
        shards, seqs = rows.column("shardId").to_pylist(), rows.column("sequenceNumber").to_pylist()
        ids = [f"{s}:{q}" for s, q in zip(shards, seqs, strict=True)]
    else:
        ids = rows.column("id").to_pylist()
    written = Counter(ids)
    delivered = Counter(f"{d.shard}:{d.seq}" for d in seen)
    assert set(written) == {f"{s}:{q}" for s, q in put} - poison_ids
    assert all(n <= delivered[i] for i, n in written.items())  # at most once per delivery
