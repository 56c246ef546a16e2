"""Start and stop real local servers: moto, kinesis-mock, ZooKeeper.

Each launcher is a context manager::

    with MotoServer() as moto:
        client = kinesis_client(moto.endpoint_url)

Servers bind to 127.0.0.1 on a free port, write their output to a log file
in a temporary directory (shown in the error if they fail to start), and are
stopped (SIGTERM, then SIGKILL) on exit.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from kinesis_spout.errors import KinesisSpoutError

LOOPBACK = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parents[2]


class BackendUnavailableError(KinesisSpoutError):
    """A local backend could not be found or did not start."""


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


class ManagedProcess:
    """A child process with a log file, a readiness check and a clean stop."""

    name = "server"
    start_timeout = 60.0

    def __init__(self, workdir: str | Path | None = None) -> None:
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"ks-{self.name}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / f"{self.name}.log"

    # subclasses -------------------------------------------------------------
    def command(self) -> Sequence[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def ready(self) -> bool:
        raise NotImplementedError

    # lifecycle ------------------------------------------------------------
    def start(self) -> Self:
        if self.proc is not None and self.proc.poll() is None:
            return self
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            list(self.command()),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.environment(),
            cwd=self.workdir,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BackendUnavailableError(
                    f"{self.name} exited with {self.proc.returncode} while starting; "
                    f"log {self.log_path}:\n{self.tail_log()}"
                )
            if self.ready():
                return self
            time.sleep(0.05)
        self.stop()
        raise BackendUnavailableError(
            f"{self.name} did not become ready in {self.start_timeout:.0f}s; "
            f"log {self.log_path}:\n{self.tail_log()}"
        )

    def stop(self, kill: bool = False) -> None:
        """SIGTERM (SIGKILL with ``kill=True`` or after 10 s) and wait."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        sig = signal.SIGKILL if kill else signal.SIGTERM
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail_log(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# --- Kinesis emulators ------------------------------------------------------


class KinesisEmulator(ManagedProcess):
    """Common shape of the Kinesis emulators: an HTTP endpoint URL."""

    kind = "kinesis"

    def __init__(self, port: int | None = None, workdir: str | Path | None = None) -> None:
        super().__init__(workdir)
        self.port = port or free_port()

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def ready(self) -> bool:
        return port_open(self.port)


class MotoServer(KinesisEmulator):
    """moto's server (``moto[server]``): fast, but never closes split shards."""

    name = "moto"
    kind = "moto"

    def command(self) -> Sequence[str]:
        return [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)]


def find_kinesis_mock() -> Path:
    """``main.js`` of the npm package ``kinesis-local`` (kinesis-mock).

    Looked up in ``$KINESIS_MOCK_MAIN``, then ``node_modules`` under
    ``$KINESIS_SPOUT_NODE_MODULES``, the repository's ``.cache`` and the
    current directory.
    """
    explicit = os.environ.get("KINESIS_MOCK_MAIN")
    if explicit:
        return Path(explicit)
    roots = [
        os.environ.get("KINESIS_SPOUT_NODE_MODULES"),
        str(REPO_ROOT / ".cache" / "node_modules"),
        str(Path.cwd() / "node_modules"),
    ]
    for root in roots:
        if root:
            p = Path(root) / "kinesis-local" / "main.js"
            if p.exists():
                return p
    raise BackendUnavailableError(
        "kinesis-mock not found: run `npm install --prefix .cache kinesis-local@0.6.2` "
        "or set KINESIS_MOCK_MAIN to its main.js"
    )


class KinesisMock(KinesisEmulator):
    """kinesis-mock (npm ``kinesis-local``), LocalStack's Kinesis engine.

    Gets shard ends, child shards and iterator expiry right; its writes slow
    down as a stream grows, so keep test streams small.
    """

    name = "kinesis-mock"
    kind = "kinesis-mock"

    def __init__(
        self,
        port: int | None = None,
        workdir: str | Path | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(port, workdir)
        self.tls_port = free_port()
        self.extra_env = extra_env or {}
        self.main_js = find_kinesis_mock()

    def stop(self, kill: bool = True) -> None:
        """kinesis-mock ignores SIGTERM (and keeps nothing on disk): kill it."""
        super().stop(kill=kill)

    def command(self) -> Sequence[str]:
        node = shutil.which("node")
        if node is None:
            raise BackendUnavailableError("kinesis-mock needs Node.js: `node` is not on PATH")
        return [node, str(self.main_js)]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "KINESIS_MOCK_PLAIN_PORT": str(self.port),
                "KINESIS_MOCK_TLS_PORT": str(self.tls_port),
                "KINESIS_MOCK_CERT_PATH": str(self.main_js.parent / "server.json"),
                "CREATE_STREAM_DURATION": "50ms",
                "DELETE_STREAM_DURATION": "50ms",
                "SPLIT_SHARD_DURATION": "200ms",
                "MERGE_SHARDS_DURATION": "200ms",
                "UPDATE_SHARD_COUNT_DURATION": "200ms",
                "LOG_LEVEL": "WARN",
                # One server serves a whole test session: its default 50 shards would run out.
                "SHARD_LIMIT": "100000",
                "ON_DEMAND_STREAM_COUNT_LIMIT": "1000",
                "SHOULD_PERSIST_DATA": "false",
            }
        )
        env.update(self.extra_env)
        return env


EMULATORS: dict[str, type[KinesisEmulator]] = {"moto": MotoServer, "kinesis-mock": KinesisMock}


# --- ZooKeeper ------------------------------------------------------------------


def pyspark_jars() -> Path:
    """The ``jars`` folder of the installed PySpark wheel (it ships ZooKeeper)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise BackendUnavailableError(
            "ZooKeeper is started from PySpark's jars: install the 'spark' extra "
            "(pip install 'kinesis-spout[spark]')"
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


_ZK_JVM_FLAGS = [
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
