"""Building the Spark job's driver: the processing, the session, the sink, the spout."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from kinesis_spout.config import SpoutConfig
from kinesis_spout.spark.driver import SparkDriver
from kinesis_spout.spark.reports import BatchReport, JobSummary, SpoutLike, print_progress
from kinesis_spout.spark.sinks import RowSink


def build_driver(
    config: SpoutConfig,
    process: Any,
    *,
    spark: Any = None,
    spout: SpoutLike | None = None,
    row_sink: RowSink | None = None,
    progress: Callable[[BatchReport], None] | None = print_progress,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> SparkDriver:
    """A ready :class:`SparkDriver` (not started).

    ``process``: a processor, a plain per-record function, or a
    ``"module:attr"`` spec (see :mod:`kinesis_spout.spark.processing`).
    ``spark`` None: the active session, or a new one (``getOrCreate``).
    ``spout`` None: a :class:`~kinesis_spout.spout.KinesisSpout` of ``config``
    (its checkpoint store and dead-letter sink come from the config).
    ``row_sink`` None: the one named by ``config.sink``.
    """
    from kinesis_spout.spark.processing import as_processor, load_processor
    from kinesis_spout.spark.runner import SparkRunner
    from kinesis_spout.spark.sinks import open_sink

    processor = (
        load_processor(process, config)
        if isinstance(process, str)
        else as_processor(process, config)
    )
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName(f"kinesis-spout {config.job_name}").getOrCreate()
    sink = row_sink if row_sink is not None else open_sink(config.sink)
    runner = SparkRunner(spark, processor, sink)
    if spout is None:
        from kinesis_spout.spout import KinesisSpout

        spout = KinesisSpout(config, clock=clock, rng=rng)
    return SparkDriver(
        config,
        runner,
        spout,
        row_sink=sink,
        n_sinks=runner.n_sinks,
        clock=clock,
        sleep=sleep,
        progress=progress,
        rng=rng,
    )


def run_job(config: SpoutConfig, process: Any, **kwargs: Any) -> JobSummary:
    """Build the driver (see :func:`build_driver` for the arguments) and run it
    until ``max_batches``, ``stop_when_idle`` or an error."""
    return build_driver(config, process, **kwargs).run()
