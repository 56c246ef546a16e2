"""Start and stop real local servers: moto, kinesis-mock, ZooKeeper.

Each launcher is a context manager::

    with MotoServer() as moto:
        client = kinesis_client(moto.endpoint_url)

Servers bind to 127.0.0.1 on a free port, write their output to a log file
in a temporary directory (shown in the error if they fail to start), and are
stopped (SIGTERM, then SIGKILL) on exit.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from kinesis_spout.testing.processes import (
    LOOPBACK,
    REPO_ROOT,
    BackendUnavailableError,
    ManagedProcess,
    free_port,
    port_open,
)
from kinesis_spout.testing.zookeeper import (
    ZooKeeperEnsemble,
    ZooKeeperPeer,
    ZooKeeperServer,
    four_letter,
    pyspark_jars,
)

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


__all__ = [
    "LOOPBACK",
    "REPO_ROOT",
    "BackendUnavailableError",
    "KinesisEmulator",
    "KinesisMock",
    "ManagedProcess",
    "MotoServer",
    "ZooKeeperEnsemble",
    "ZooKeeperPeer",
    "ZooKeeperServer",
    "find_kinesis_mock",
    "four_letter",
    "free_port",
    "port_open",
    "pyspark_jars",
]
