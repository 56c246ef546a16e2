"""Fixtures of the streaming-source tests (helpers are in streaming_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kinesis_spout.testing.streams import create_stream


@pytest.fixture
def stream(moto_client: Any, unique_name: str) -> str:
    """A fresh 4-shard stream on the moto server."""
    create_stream(moto_client, unique_name, 4)
    return unique_name


@pytest.fixture(scope="session")
def kinesis_spark(spark: Any) -> Any:
    """The shared session with the ``kinesis`` format registered."""
    from kinesis_spout.streaming import register

    register(spark)
    return spark


@pytest.fixture
def sink_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "sink"
