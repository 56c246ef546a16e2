"""Fixtures of the Spark-job tests: a job config on the moto server per test.

Spark runs in-process through the shared ``spark`` fixture (local[2]); only
the SIGKILL test and the demo test start ``spark-submit``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import spark_job_helpers
from kit import spout_config

from devkit.cluster import StandaloneCluster
from kinesis_spout.config import SpoutConfig
from kinesis_spout.testing.servers import MotoServer


@pytest.fixture(scope="session", autouse=True)
def _ship_helpers_by_value() -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(spark_job_helpers)


JobConfig = Callable[..., SpoutConfig]


@pytest.fixture
def job_config(moto_server: MotoServer, unique_name: str, tmp_path: Path) -> JobConfig:
    """A fast-polling job config for stream ``unique_name`` on the moto server, its
    checkpoints and dead letters under ``tmp_path`` (overridable)."""

    def make(**overrides: Any) -> SpoutConfig:
        values: dict[str, Any] = {
            "stream_name": unique_name,
            "job_name": unique_name,
            "endpoint_url": moto_server.endpoint_url,
            "empty_shard_backoff": 0.1,
            "batch_max_wait": 0.3,
            "checkpoint_interval": 0.5,
            "stop_when_idle": 1.5,
            "retry_backoff": 0.05,
            "retry_backoff_max": 0.2,
        }
        return spout_config(under=tmp_path, fast=False, **{**values, **overrides})

    return make


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[StandaloneCluster]:
    """A standalone cluster (master + two 1-core workers) from PySpark's jars."""
    with StandaloneCluster(workers=2) as cluster:
        yield cluster
