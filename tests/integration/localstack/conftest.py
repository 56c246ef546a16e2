"""LocalStack (host mode, no docker) for the whole session, with the repo's init
hooks (``localstack/init``), and a fixture that runs a test on every emulator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kinesis_spout.testing.localstack import LocalStackServer
from kinesis_spout.testing.servers import REPO_ROOT, KinesisEmulator

DEMO_STREAMS = "demo:2,demo-single"


@pytest.fixture(scope="session")
def localstack() -> Iterator[LocalStackServer]:
    """One LocalStack per session (it takes ~10 s to start); it fails, never skips,
    when its virtualenv or its pre-installed Kinesis engine is missing."""
    server = LocalStackServer(
        init_dir=REPO_ROOT / "localstack" / "init",
        extra_env={"KINESIS_DEMO_STREAMS": DEMO_STREAMS},
    )
    with server:
        yield server


@pytest.fixture(params=["moto", "kinesis-mock", "localstack"])
def any_emulator(request: pytest.FixtureRequest) -> KinesisEmulator:
    """Each test using this runs against moto, kinesis-mock and LocalStack."""
    name = {"moto": "moto_server", "kinesis-mock": "kinesis_mock"}.get(request.param, "localstack")
    server: KinesisEmulator = request.getfixturevalue(name)
    return server
