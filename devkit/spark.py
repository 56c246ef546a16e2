"""A local SparkSession configured for tests, benchmarks and the demo; the job's config
as the benches time it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from kinesis_spout.config import SpoutConfig


def local_spark_session(app_name: str, master: str = "local[2]", **conf: str) -> Any:
    """A quiet local SparkSession with Arrow on and the UI off."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for k, v in conf.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def bench_job_config(
    stream: str,
    endpoint: str,
    workdir: Path,
    job_name: str,
    *,
    batch: int = 10_000,
) -> SpoutConfig:
    """The Spark job as the benches time it: file checkpoints and dead letters under
    ``workdir``, micro-batches of ``batch`` records (filled for at most 1 s), in flight the
    larger of ``batch`` and 10,000, no message timeout, stopping 0.5 s after the stream is
    drained."""
    return SpoutConfig(
        stream_name=stream,
        job_name=job_name,
        endpoint_url=endpoint,
        checkpoint_store=f"file://{workdir / 'checkpoints'}",
        dead_letter=str(workdir / "dead-letter"),
        batch_size=batch,
        batch_max_wait=1.0,
        max_in_flight=max(batch, 10_000),
        empty_shard_backoff=0.2,
        stop_when_idle=0.5,
        checkpoint_interval=5.0,
        message_timeout=0.0,
    )
