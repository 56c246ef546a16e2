"""Fixtures shared by every test: real local servers on loopback.

Servers are started once per session and every test gets its own stream
name and ZooKeeper root, so tests never see each other's data. A backend
that cannot start fails the test (never a skip): CI must exercise them all.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kit import FakeClock

from devkit.localstack import LocalStackServer
from kinesis_spout.testing.servers import (
    REPO_ROOT,
    KinesisEmulator,
    KinesisMock,
    MotoServer,
    ZooKeeperServer,
)
from kinesis_spout.testing.streams import emulator_client
from kinesis_spout.testing.zookeeper import SHORT_JVM_FLAGS

os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
# The Spark drivers the tests start (spark-submit, and this process's SparkSession) live
# for seconds: C1 alone and the serial collector cut a JVM's start-up CPU by about 40%
# (a bare spark-submit here: 18.7 s of CPU by default, 11.2 s with these). Benches keep
# the JVM's defaults.
os.environ.setdefault("SPARK_SUBMIT_OPTS", " ".join(SHORT_JVM_FLAGS))


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@pytest.fixture(scope="session")
def dynamodb(moto_server: MotoServer) -> Iterator[str]:
    """moto's server as the DynamoDB endpoint (real HTTP, the same server as Kinesis):
    ``AWS_ENDPOINT_URL_DYNAMODB`` is set for this process and every process it starts
    from now on (the ``spark`` fixture asks for it first, so Spark's Python workers have
    it too). Each test's ``dynamodb://`` store names a table of its own."""
    before = os.environ.get("AWS_ENDPOINT_URL_DYNAMODB")
    os.environ["AWS_ENDPOINT_URL_DYNAMODB"] = moto_server.endpoint_url
    yield moto_server.endpoint_url
    if before is None:
        os.environ.pop("AWS_ENDPOINT_URL_DYNAMODB", None)
    else:
        os.environ["AWS_ENDPOINT_URL_DYNAMODB"] = before


StoreUrl = Callable[[str], str]


@pytest.fixture
def store_url_of(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> StoreUrl:
    """``store_url_of(kind)``: a checkpoint-store URL of this test for ``kind`` ("file",
    "zk" or "dynamodb"), its backend started (a directory, a ZooKeeper root, a table)."""

    def make(kind: str) -> str:
        if kind == "file":
            return f"file://{tmp_path / 'checkpoints'}"
        if kind == "zk":
            zookeeper: ZooKeeperServer = request.getfixturevalue("zookeeper")
            return zookeeper.url(f"/tests/{unique_name}")
        if kind == "dynamodb":
            request.getfixturevalue("dynamodb")
            return f"dynamodb://{unique_name}"
        raise ValueError(f"no store kind {kind!r}")

    return make


@pytest.fixture(scope="session")
def kinesis_mock() -> Iterator[KinesisMock]:
    with KinesisMock() as server:
        yield server


LOCALSTACK_DEMO_STREAMS = "demo:2,demo-single"
"""Streams the repo's init hook (``localstack/init``) makes in the session's LocalStack."""


@pytest.fixture(scope="session")
def localstack() -> Iterator[LocalStackServer]:
    """One LocalStack (host mode, no docker) per session, with the repo's init hooks
    (it takes ~10 s to start); it fails, never skips, when its virtualenv or its
    pre-installed Kinesis engine is missing. The enhanced fan-out tests use it too."""
    server = LocalStackServer(
        init_dir=REPO_ROOT / "localstack" / "init",
        extra_env={"KINESIS_DEMO_STREAMS": LOCALSTACK_DEMO_STREAMS},
    )
    with server:
        yield server


@pytest.fixture(params=["moto", "kinesis-mock"])
def emulator(request: pytest.FixtureRequest) -> KinesisEmulator:
    """Each test using this runs once against moto and once against kinesis-mock."""
    name = "moto_server" if request.param == "moto" else "kinesis_mock"
    server: KinesisEmulator = request.getfixturevalue(name)
    return server


@pytest.fixture
def moto_client(moto_server: MotoServer) -> Any:
    return emulator_client(moto_server.endpoint_url)


@pytest.fixture
def emulator_kinesis(emulator: KinesisEmulator) -> Any:
    """A boto3 client for the parametrised emulator."""
    return emulator_client(emulator.endpoint_url)


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def fake_clock() -> FakeClock:
    """A clock at 1000.0 s that only the test moves (``advance``, ``sleep``)."""
    return FakeClock()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A short name unique to this test: stream names, job names, ZK roots."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-")
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def spark(dynamodb: str) -> Iterator[Any]:
    """One local[2] SparkSession for the whole test session (starting one takes ~5 s),
    started after the DynamoDB endpoint is set (its Python workers inherit it)."""
    from devkit.spark import local_spark_session

    session = local_spark_session("kinesis-spout-tests")
    try:
        yield session
    finally:
        session.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if a ZooKeeper client is still started when the tests end.

    A client left open keeps reconnecting to a server the fixtures already stopped
    and prints "Connection dropped: connection refused" after the suite (hole 9).
    """
    import gc
    import sys

    kazoo_client = sys.modules.get("kazoo.client")
    if kazoo_client is None:
        return
    live = [
        o
        for o in gc.get_objects()
        if isinstance(o, kazoo_client.KazooClient) and not o._stopped.is_set()
    ]
    if live:
        print(f"\n{len(live)} ZooKeeper client(s) still started at the end of the tests:")
        for client in live:
            print(f"  {client.hosts} state {client.state}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
