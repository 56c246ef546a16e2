"""Local ZooKeeper for tests: one server, or a quorum ensemble of peers, run from the
ZooKeeper jars that ship with PySpark."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from kinesis_spout.testing.processes import (
    LOOPBACK,
    BackendUnavailableError,
    ManagedProcess,
    free_port,
    port_open,
)


def pyspark_jars() -> Path:
    """The ``jars`` folder of the installed PySpark wheel (it ships ZooKeeper)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise BackendUnavailableError(
            "ZooKeeper is started from PySpark's jars: install the 'spark' extra "
            "(pip install pyspark)"
        )
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    if not any(jars.glob("zookeeper-*.jar")):
        raise BackendUnavailableError(f"no zookeeper-*.jar in {jars}")
    return jars


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise BackendUnavailableError("ZooKeeper needs Java: `java` is not on PATH")
    return java


SHORT_JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""JVM flags for the local servers a test starts (ZooKeeper, a standalone Spark master
and workers): they live for seconds and do little work, so the quick C1 compiler
alone and the serial collector save about 40% of a JVM's start-up CPU."""

_ZK_JVM_FLAGS = [
    *SHORT_JVM_FLAGS,
    "-Xmx256m",
    "-Dzookeeper.admin.enableServer=false",
    "-Dzookeeper.4lw.commands.whitelist=*",
    "-Dzookeeper.jmx.log4j.disable=true",
]


def four_letter(port: int, cmd: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``srvr``...)."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout) as s:
            s.sendall(cmd.encode())
            chunks = []
            while True:
                b = s.recv(4096)
                if not b:
                    break
                chunks.append(b)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer(ManagedProcess):
    """A standalone ZooKeeper (``ZooKeeperServerMain PORT DATADIR``).

    ``stop()`` then ``start()`` restarts it on the same port with the same
    data, which is how tests take ZooKeeper away mid-run.
    """

    name = "zookeeper"

    def __init__(self, port: int | None = None, workdir: str | Path | None = None) -> None:
        super().__init__(workdir)
        self.port = port or free_port()
        self.data_dir = self.workdir / "data"
        self.data_dir.mkdir(exist_ok=True)

    @property
    def hosts(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def url(self, root: str = "/kinesis-spout") -> str:
        return f"zk://{self.hosts}{root}"

    def command(self) -> Sequence[str]:
        return [
            _java(),
            *_ZK_JVM_FLAGS,
            "-cp",
            f"{pyspark_jars()}/*",
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(self.port),
            str(self.data_dir),
        ]

    def ready(self) -> bool:
        # ``ruok`` answers before the server takes sessions; ``srvr`` reports a mode only after.
        return "Mode:" in four_letter(self.port, "srvr")


class ZooKeeperPeer(ManagedProcess):
    """One node of a :class:`ZooKeeperEnsemble` (``QuorumPeerMain zoo.cfg``)."""

    name = "zookeeper-peer"

    def __init__(self, ensemble: ZooKeeperEnsemble, myid: int) -> None:
        super().__init__(ensemble.workdir / f"node{myid}")
        self.ensemble = ensemble
        self.myid = myid
        self.port = ensemble.client_ports[myid - 1]
        data = self.workdir / "data"
        data.mkdir(exist_ok=True)
        (data / "myid").write_text(str(myid))
        servers = "\n".join(
            f"server.{i + 1}={LOOPBACK}:{q}:{e}"
            for i, (q, e) in enumerate(
                zip(ensemble.quorum_ports, ensemble.election_ports, strict=True)
            )
        )
        (self.workdir / "zoo.cfg").write_text(
            f"tickTime=500\ninitLimit=20\nsyncLimit=10\ndataDir={data}\n"
            f"clientPort={self.port}\nclientPortAddress={LOOPBACK}\n{servers}\n"
        )

    def command(self) -> Sequence[str]:
        return [
            _java(),
            *_ZK_JVM_FLAGS,
            "-cp",
            f"{pyspark_jars()}/*",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self.workdir / "zoo.cfg"),
        ]

    def ready(self) -> bool:
        return port_open(self.port)

    def mode(self) -> str:
        """``leader``, ``follower`` or ``""`` if not serving."""
        for line in four_letter(self.port, "srvr").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return ""


class ZooKeeperEnsemble:
    """A ZooKeeper ensemble of ``size`` nodes on loopback."""

    def __init__(self, size: int = 3, workdir: str | Path | None = None) -> None:
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="ks-zk-ensemble-"))
        self.client_ports = [free_port() for _ in range(size)]
        self.quorum_ports = [free_port() for _ in range(size)]
        self.election_ports = [free_port() for _ in range(size)]
        self.nodes = [ZooKeeperPeer(self, i + 1) for i in range(size)]

    @property
    def hosts(self) -> str:
        return ",".join(f"{LOOPBACK}:{p}" for p in self.client_ports)

    def url(self, root: str = "/kinesis-spout") -> str:
        return f"zk://{self.hosts}{root}"

    def start(self, timeout: float = 60.0) -> Self:
        for n in self.nodes:
            n.start()
        self.wait_for_quorum(timeout)
        return self

    def wait_for_quorum(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            modes = [n.mode() for n in self.nodes if n.running]
            if "leader" in modes and all(modes):
                return
            time.sleep(0.1)
        raise BackendUnavailableError(f"ensemble formed no quorum in {timeout:.0f}s")

    def leader(self) -> ZooKeeperPeer:
        for n in self.nodes:
            if n.running and n.mode() == "leader":
                return n
        raise BackendUnavailableError("no leader")

    def close(self) -> None:
        for n in self.nodes:
            n.close()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
