"""Building the Spark job's driver: the processing, the session, the sink, the spout."""

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
from kinesis_spout.spark.driver import SparkDriver
from kinesis_spout.spark.executor_driver import ExecutorDriver
from kinesis_spout.spark.process.sinks import RowSink
from kinesis_spout.spark.processing import (
    FanOutProcessor,
    Processor,
    RecordProcessor,
    TransformProcessor,
)
from kinesis_spout.spark.reports import BatchReport, JobSummary, SpoutLike, print_progress

if TYPE_CHECKING:
    from kinesis_spout.spark.read.frames import FrameJobs
    from kinesis_spout.spark.read.streams import StreamPlanners

log = logging.getLogger(__name__)


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
    metrics: MetricsCollector | None = None,
    job_lease: bool = True,
    planners: StreamPlanners | None = None,
) -> SparkDriver | ExecutorDriver:
    """A ready driver loop (not started): :class:`ExecutorDriver` for executor reads
    (``read_on = "executors"``, the default, every processing style), else
    :class:`SparkDriver` (the driver reads: ``read_on = "driver"``, or a ``spout`` or a
    ``row_sink`` object given by the caller, which live in the driver).

    ``process``: a processor, a plain per-record function, or a
    ``"module:attr"`` spec (see :mod:`kinesis_spout.spark.processing`).
    ``spark`` None: the active session, or a new one (``getOrCreate``).
    ``spout`` None: a :class:`~kinesis_spout.spout.KinesisSpout` of ``config``
    (its store and dead-letter sink from the config). ``row_sink`` None: ``config.sink``'s.
    ``metrics``: where the spout and the loop report (the job passes its endpoint's);
    None: the spout's own (its endpoint with ``metrics_port``, else none).
    ``job_lease``: the spout takes the job lease on open (``job.py``, holding it: False).
    ``planners``: executor reads' planners over a reader opened already (``job.py`` opens
    it while the session starts: :mod:`~kinesis_spout.spark.launch.early`); None: made here.
    """
    from kinesis_spout.spark.process.runner import uncompressed_caches
    from kinesis_spout.spark.processing import as_processor, load_processor

    processor = load_processor(process, config) if isinstance(process, str) else None
    processor = processor or as_processor(process, config)
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName(f"kinesis-spout {config.job_name}").getOrCreate()
    if not isinstance(processor, RecordProcessor):
        # Only transforms and fan-outs cache. A per-record job never touches the SQL
        # session state, whose creation (the first ``spark.conf``) costs its start-up
        # 0.1-0.2 s.
        uncompressed_caches(spark)
    if config.read_on == "executors":
        if spout is None and row_sink is None:
            planners = planners or _executor_planners(config, clock, rng, metrics, job_lease)
            return _executor_driver(
                config, spark, processor, planners, clock, sleep, progress, metrics
            )
        log.warning(
            "reading on the driver: executor reads use the configured sink, not a spout "
            "or row sink object given by the caller"
        )
    if spout is None:
        spout = _driver_spout(config, clock, rng, metrics, job_lease)
    return _driver_reads(
        config, spark, processor, spout, row_sink, clock, sleep, progress, rng, metrics
    )


def _driver_reads(
    config: SpoutConfig,
    spark: Any,
    processor: Processor,
    spout: SpoutLike,
    row_sink: RowSink | None,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    progress: Callable[[BatchReport], None] | None,
    rng: random.Random | None,
    metrics: MetricsCollector | None,
) -> SparkDriver:
    """The driver-read loop over ``spout``: its runner, sink and fast retries."""
    from kinesis_spout.spark.process.fastretry import FastRetry
    from kinesis_spout.spark.process.runner import SparkRunner
    from kinesis_spout.spark.process.sinks import open_sink

    sink = row_sink if row_sink is not None else open_sink(config.sink)
    fast = FastRetry.of(config)
    runner = SparkRunner(spark, processor, sink, fast)
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
        fast=fast,
        metrics=metrics,
    )


def _driver_spout(
    config: SpoutConfig,
    clock: Callable[[], float],
    rng: random.Random | None,
    metrics: MetricsCollector | None,
    job_lease: bool,
) -> SpoutLike:
    """The spout of driver reads. Every record it hands out gets its outcome when its
    micro-batch completes (fan-out trees keep ``message_timeout`` in the driver's
    ledger); its own message timeout would fail the records of a batch filled while a
    slow one runs (the pipeline) and deliver them again, so it is off."""
    from kinesis_spout.multistream import open_reader

    return open_reader(  # a KinesisSpout, or a MultiStreamSpout of several streams
        config.replace(message_timeout=0.0),
        clock=clock,
        rng=rng,
        metrics=metrics,
        job_lease=job_lease,
    )


def _executor_planners(
    config: SpoutConfig,
    clock: Callable[[], float],
    rng: random.Random | None,
    metrics: MetricsCollector | None,
    job_lease: bool,
) -> StreamPlanners:
    """The planners of a new executor-read reader of ``config`` (opened by the loop)."""
    from kinesis_spout.spark.read.planner import executor_read_spout
    from kinesis_spout.spark.read.streams import StreamPlanners

    return StreamPlanners(
        executor_read_spout(config, clock=clock, rng=rng, metrics=metrics, job_lease=job_lease)
    )


def _executor_driver(
    config: SpoutConfig,
    spark: Any,
    processor: Processor,
    planners: StreamPlanners,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    progress: Callable[[BatchReport], None] | None,
    metrics: MetricsCollector | None,
) -> ExecutorDriver:
    if isinstance(processor, RecordProcessor):
        fn, frames = processor.fn, None
    else:
        fn, frames = _nothing, _frame_jobs(config, spark, processor)
    return ExecutorDriver(
        config,
        spark,
        fn,
        planners,
        clock=clock,
        sleep=sleep,
        progress=progress,
        metrics=metrics,
        frames=frames,
    )


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
