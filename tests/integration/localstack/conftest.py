"""A fixture that runs a test on every emulator (LocalStack itself is the session
fixture ``localstack`` of ``tests/conftest.py``)."""

from __future__ import annotations

import pytest

from kinesis_spout.testing.servers import KinesisEmulator


@pytest.fixture(params=["moto", "kinesis-mock", "localstack"])
def any_emulator(request: pytest.FixtureRequest) -> KinesisEmulator:
    """Each test using this runs against moto, kinesis-mock and LocalStack."""
    name = {"moto": "moto_server", "kinesis-mock": "kinesis_mock"}.get(request.param, "localstack")
    server: KinesisEmulator = request.getfixturevalue(name)
    return server
