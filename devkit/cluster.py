"""A real Spark standalone cluster on loopback, started from PySpark's own jars.

One master (``org.apache.spark.deploy.master.Master``) and ``workers`` workers
(``org.apache.spark.deploy.worker.Worker``, ``--cores 1 --memory 1g`` by
default), each a JVM with its own work directory and log, on free ports.
:meth:`StandaloneCluster.start` waits until the master's JSON page lists every
worker ALIVE; :meth:`kill_worker` is a ``kill -9`` of a worker JVM and of the
executor JVMs it started (their Python workers die with them); :meth:`stop`
ends everything by process id.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from kinesis_spout.testing.processes import (
    LOOPBACK,
    BackendUnavailableError,
    ManagedProcess,
    free_port,
    port_open,
)
from kinesis_spout.testing.zookeeper import SHORT_JVM_FLAGS, _java, pyspark_jars


def _spark_env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(pyspark_jars().parent),
        SPARK_LOCAL_IP=LOOPBACK,
        SPARK_LOCAL_DIRS=str(workdir / "local"),
        PYSPARK_PYTHON=sys.executable,
        SPARK_NO_DAEMONIZE="1",
        SPARK_SCALA_VERSION="2.13",  # what bin/load-spark-env.sh sets: no build dirs here
    )
    return env


class _SparkJvm(ManagedProcess):
    start_timeout = 90.0

    def __init__(self, name: str, workdir: Path, main: str, args: Sequence[str]) -> None:
        self.name = name
        super().__init__(workdir)
        self.main = main
        self.args = list(args)
        self.ui_port = free_port()

    def command(self) -> Sequence[str]:
        cp = f"{pyspark_jars()}/*"
        return [
            _java(),
            *SHORT_JVM_FLAGS,
            "-Xmx512m",
            "-cp",
            cp,
            self.main,
            *self.args,
            "--webui-port",
            str(self.ui_port),
        ]

    def environment(self) -> dict[str, str]:
        return _spark_env(self.workdir)

    def ready(self) -> bool:
        return port_open(self.ui_port)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


class StandaloneCluster:
    """A master and ``workers`` workers on loopback; see the module docstring."""

    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ks-spark-cluster-"))
        self.port = free_port()
        self.master = _SparkJvm(
            "spark-master",
            self.root / "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", LOOPBACK, "--port", str(self.port)],
        )
        self.workers = [
            _SparkJvm(
                f"spark-worker-{i}",
                self.root / f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                [
                    "--host",
                    LOOPBACK,
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--work-dir",
                    str(self.root / f"worker-{i}" / "work"),
                    self.master_url,
                ],
            )
            for i in range(workers)
        ]

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    def state(self) -> dict[str, Any]:
        """The master's JSON status page."""
        url = f"http://{LOOPBACK}:{self.master.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as resp:
            data: dict[str, Any] = json.loads(resp.read())
        return data

    def alive_workers(self) -> int:
        return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")

    def start(self, timeout: float = 90.0) -> Self:
        self.master.start()
        for w in self.workers:
            w.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                if self.alive_workers() >= len(self.workers):
                    return self
            time.sleep(0.2)
        logs = "\n".join(f"{j.name}:\n{j.tail_log(10)}" for j in [self.master, *self.workers])
        self.stop()
        raise BackendUnavailableError(
            f"Spark standalone cluster at {self.master_url}: workers did not register "
            f"in {timeout:.0f}s\n{logs}"
        )

    def executor_pids(self, index: int) -> list[int]:
        """Executor JVMs started by worker ``index`` (its child processes)."""
        parent = self.workers[index].pid
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                cmd = (proc / "cmdline").read_bytes()
            except (OSError, IndexError, ValueError):
                continue
            if ppid == parent and b"CoarseGrainedExecutorBackend" in cmd:
                pids.append(int(proc.name))
        return pids

    def kill_worker(self, index: int) -> list[int]:
        """``kill -9`` of worker ``index`` and its executors; the pids killed."""
        worker = self.workers[index]
        pids = self.executor_pids(index)
        if worker.pid is not None:
            pids.append(worker.pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL) if pid == worker.pid else os.kill(
                    pid, signal.SIGKILL
                )
        return pids

    def stop(self) -> None:
        """Stop every JVM (workers, their executors, the master); idempotent."""
        for i, w in enumerate(self.workers):
            leftovers = self.executor_pids(i)
            w.stop()
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.master.stop()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def cluster_spark_conf(cluster: StandaloneCluster) -> dict[str, str]:
    """The Spark conf of a driver in this process using ``cluster``."""
    return {
        "spark.master": cluster.master_url,
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
        "spark.cores.max": str(len(cluster.workers)),
        "spark.pyspark.python": sys.executable,
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.task.maxFailures": "4",
        # The first job waits (up to 60 s) for every executor to register: on a busy
        # machine one worker's executor may come late, and every task would run in the other.
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
    } | {
        f"spark.executorEnv.{name}": os.environ.get(name, default)
        for name, default in _TEST_AWS_ENV.items()
    }


_TEST_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""Credentials for the local emulators (the executors' boto3 needs some)."""
