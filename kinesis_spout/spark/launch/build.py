"""Building the Spark job's micro-batch loop: the processing, the session, the planners."""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kinesis_spout.config import SpoutConfig
from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.spark.loop import MicroBatchLoop
from kinesis_spout.spark.process.styles import (
    FanOutProcessor,
    RecordProcessor,
    TransformProcessor,
)
from kinesis_spout.spark.reports import BatchReport, JobSummary, print_progress

if TYPE_CHECKING:
    from kinesis_spout.spark.plan import Planner
    from kinesis_spout.spark.read.frames import FrameJobs

log = logging.getLogger(__name__)


def build_driver(
    config: SpoutConfig,
    process: Any,
    *,
    spark: Any = None,
    progress: Callable[[BatchReport], None] | None = print_progress,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    metrics: MetricsCollector | None = None,
    job_lease: bool = True,
) -> MicroBatchLoop:
    """A ready micro-batch loop (not started) for every processing style.

    ``process``: a processor, a plain per-record function, or a
    ``"module:attr"`` spec (see :mod:`kinesis_spout.spark.process.styles`).
    ``spark`` None: the active session, or a new one (``getOrCreate``).
    ``metrics``: where the reader and the loop report (the job passes its endpoint's);
    None: the reader's own (its endpoint with ``metrics_port``, else none).
    ``job_lease``: the reader takes the job lease on open (``job.py``, holding it: False).
    """
    from kinesis_spout.spark.process.runner import uncompressed_caches
    from kinesis_spout.spark.process.styles import as_processor, load_processor

    processor = load_processor(process, config) if isinstance(process, str) else None
    processor = processor or as_processor(process, config)
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName(f"kinesis-spout {config.job_name}").getOrCreate()
    if not isinstance(processor, RecordProcessor):
        # Only transforms and fan-outs cache. A per-record job never touches the SQL
        # session state.
        uncompressed_caches(spark)
    reader = _reader(config, clock, rng, metrics, job_lease)
    if isinstance(processor, RecordProcessor):
        fn, frames = processor.fn, None
    else:
        fn, frames = _nothing, _frame_jobs(config, spark, processor)
    return MicroBatchLoop(
        config,
        spark,
        fn,
        reader,
        clock=clock,
        sleep=sleep,
        progress=progress,
        metrics=metrics,
        frames=frames,
    )


def _reader(
    config: SpoutConfig,
    clock: Callable[[], float],
    rng: random.Random | None,
    metrics: MetricsCollector | None,
    job_lease: bool,
) -> Planner:
    """The planner over a new reader of ``config`` whose shards the Spark tasks read
    (opened by the loop)."""
    from kinesis_spout.spark.plan import Planner
    from kinesis_spout.spark.quarantine import Quarantine
    from kinesis_spout.spout import KinesisSpout

    reader = KinesisSpout(
        config,
        clock=clock,
        rng=rng,
        metrics=metrics,
        job_lease=job_lease,
        read_here=False,
        reader="kinesis-spout job",
    )
    return Planner(reader, Quarantine())


def _nothing(record: object) -> None:
    """The per-record function of a transform's or fan-out's failure probes."""


def _frame_jobs(
    config: SpoutConfig,
    spark: Any,
    processor: TransformProcessor | FanOutProcessor,
) -> FrameJobs:
    """The jobs of a transform or fan-out on the executors; their reads record their
    ends in the checkpoint store's batch-end store (a ``file://`` path made absolute,
    the same for every executor on this machine)."""
    from kinesis_spout.spark.read.frames import FrameJobs
    from kinesis_spout.spark.read.recorded import RecordTo

    url = config.checkpoint_store
    if url.startswith("file://"):
        url = "file://" + os.path.abspath(url[len("file://") :])
    job, stream, auth = config.job_name, config.stream_name, config.zk_auth
    region, profile, role = config.region, config.profile, config.assumed_role  # dynamodb:// only

    def ends(run: str, key: int) -> RecordTo:  # each plan's stream: RecordTo.of
        return RecordTo(url, job, stream, run, key, auth, region=region, profile=profile, role=role)

    stores = [replace(ends("", 0), stream=name).open() for name in config.stream_names]
    return FrameJobs(spark, processor, config.sink, ends, stores)


def run_job(config: SpoutConfig, process: Any, **kwargs: Any) -> JobSummary:
    """Build the driver (see :func:`build_driver` for the arguments) and run it
    until ``max_batches``, ``stop_when_idle`` or an error."""
    return build_driver(config, process, **kwargs).run()
