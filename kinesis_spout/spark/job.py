"""The ``spark-submit`` entry point of the kinesis-spout job (``kinesis-spout run`` calls
``spark-submit`` with it)::

    spark-submit --master local[2] kinesis_spout/spark/job.py \\
        --config job.toml [--<field> VALUE ...] [--process module:function]

It takes the job lease, starts Spark and runs the micro-batch loop to its summary. Its
configuration, signals and exit codes: ``docs/spark-job.md``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

STARTED = time.perf_counter()
"""This module's first line: the job's start-up times count from here."""

if __name__ == "__main__" and sys.path and Path(sys.path[0]).resolve() == Path(__file__).parent:
    # Run as a script: this folder must not shadow top-level modules.
    sys.path.pop(0)

if __name__ == "__main__":
    from kinesis_spout.spark.launch.sparkpath import prefer_installed_pyspark

    sys.path[:] = prefer_installed_pyspark(sys.path)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
from collections.abc import Callable, Mapping, Sequence  # noqa: E402
from types import FrameType  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

from kinesis_spout.checkpoint.joblease import JobLease, open_config_job_lease  # noqa: E402
from kinesis_spout.config import SpoutConfig  # noqa: E402
from kinesis_spout.config.load import add_config_arguments, load_config  # noqa: E402
from kinesis_spout.errors import ConfigError, KinesisSpoutError  # noqa: E402
from kinesis_spout.metrics import MetricsCollector  # noqa: E402
from kinesis_spout.observability.endpoint import MetricsEndpoint  # noqa: E402
from kinesis_spout.spark.launch.launcher import (  # noqa: E402
    PIDFILE_ENV,
    exit_now,
    watch_launcher,
    watch_parent,
)
from kinesis_spout.spark.startup import StartupTimes  # noqa: E402

if TYPE_CHECKING:
    from kinesis_spout.spark.loop import MicroBatchLoop

log = logging.getLogger(__name__)

PROCESS_KEY = "process"
JOB_READER = "kinesis-spout run"
"""What the job lease's holder record says reads (``status`` shows it)."""


def build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="job.py",
        description="kinesis-spout PySpark job: read Kinesis, process micro-batches on Spark.",
    )
    parser.add_argument(
        "--process",
        metavar="MODULE:FUNCTION",
        help="the processing: a per-record function, a processor or a processor factory "
        "(module:attr or path/file.py:attr); default: 'process' in the config file",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="DEBUG logging")
    add_config_arguments(parser)
    return parser


def job_config(
    args: argparse.Namespace, env: Mapping[str, str] | None = None
) -> tuple[SpoutConfig, str | None]:
    """The config (file < environment < flags) and the process spec (``--process``
    wins over the file's ``process`` key)."""
    overrides = {
        k[len("cfg_") :]: v for k, v in vars(args).items() if k.startswith("cfg_") and v is not None
    }
    config = load_config(getattr(args, "config", None), env=env, overrides=overrides)
    return config, getattr(args, "process", None) or config.process


def describe(config: SpoutConfig, process: str) -> str:
    """The job's one-line banner."""
    return (
        f"kinesis-spout job {config.job_name!r}: stream {config.stream_name!r} at "
        f"{config.endpoint_url or 'AWS'} ({config.region}), process {process}, "
        f"batch {config.batch_size}/{config.batch_max_wait:g}s, retry_limit {config.retry_limit}, "
        f"max_in_flight {config.max_in_flight}, checkpoints {config.checkpoint_store} "
        f"every {config.checkpoint_interval:g}s, dead letters {config.dead_letter}, "
        f"sink {config.sink}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    times = StartupTimes(STARTED)
    times.mark("imports")
    args = build_arg_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    for noisy in ("botocore", "boto3", "urllib3"):  # -v is this job's DEBUG, not theirs
        logging.getLogger(noisy).setLevel(logging.INFO)
    try:
        config, process = job_config(args)
        times.mark("config")
        if not process:
            raise ConfigError(
                PROCESS_KEY, None, "--process module:function, or process = ... in the config file"
            )
        # Before the job lease and Spark: a taken port stops the job before it starts.
        endpoint = MetricsEndpoint.of(config, "spark")
        if endpoint is not None:
            endpoint.start()
    except KinesisSpoutError as exc:
        print(f"kinesis-spout job: error: {exc}", file=sys.stderr)
        return 2
    pidfile = os.environ.get(PIDFILE_ENV)
    try:
        if pidfile:
            Path(pidfile).write_text(str(os.getpid()))
        return run_tied_to_launcher(
            config, process, endpoint.metrics if endpoint else None, times=times
        )
    finally:
        if pidfile:  # the launcher may be gone (kill -9) and cannot remove it
            with contextlib.suppress(OSError):
                os.unlink(pidfile)
        if endpoint is not None:  # the last scrape sees the figures of the summary line
            endpoint.close()


def run_tied_to_launcher(
    config: SpoutConfig,
    process: str,
    metrics: MetricsCollector | None = None,
    *,
    times: StartupTimes | None = None,
) -> int:
    """Take the job lease and run, stopping when the launcher dies."""
    stop: list[Callable[[str], None]] = []

    def on_launcher_gone() -> None:
        if stop:
            stop[0]("launcher gone")
        else:  # still starting: nothing read, nothing to checkpoint
            exit_now(1)

    watch = watch_launcher(on_launcher_gone)
    jvm = watch_parent(on_launcher_gone)  # spark-submit's JVM: a SIGTERM ends it
    try:
        lease = take_job_lease(config)
    except KinesisSpoutError as exc:
        print(f"kinesis-spout job: error: {exc}", file=sys.stderr)
        return 3
    times = times or StartupTimes()
    times.mark("lease")
    try:
        return run_with_lease(config, process, lease, stop, metrics, times=times)
    finally:
        lease.release()
        for w in (watch, jvm):
            if w is not None:
                w.stop()


def take_job_lease(config: SpoutConfig) -> JobLease:
    """The job lease of ``config``'s job, taken before Spark starts (see joblease)."""
    lease = open_config_job_lease(config, JOB_READER)
    try:
        lease.acquire(wait=config.wait_for_lease)
    except BaseException:
        lease.release()
        raise
    return lease


def run_with_lease(
    config: SpoutConfig,
    process: str,
    lease: JobLease,
    stop: list[Callable[[str], None]],
    metrics: MetricsCollector | None = None,
    *,
    times: StartupTimes | None = None,
) -> int:
    """Start Spark and run the micro-batch loop; the exit code. Once the driver
    exists, its ``request_stop`` is put in ``stop`` (for the launcher watch)."""
    times = times or StartupTimes()
    spark = start_spark(config, process, times)
    from kinesis_spout.spark.launch.build import build_driver
    from kinesis_spout.spark.launch.deploy import check_deploy_mode

    print(describe(config, process), flush=True)
    try:
        mode = spark.sparkContext.getConf().get("spark.submit.deployMode", "client")
        check_deploy_mode(config, str(mode))
        # The lease is this process's already (take_job_lease): the reader takes none.
        driver = build_driver(config, process, spark=spark, metrics=metrics, job_lease=False)
    except KinesisSpoutError as exc:
        print(f"kinesis-spout job: error: {exc}", file=sys.stderr)
        spark.stop()
        return 2
    times.mark("build")
    driver.startup = times
    lease.on_lost = lambda: driver.request_stop("job lease lost")
    stop.append(driver.request_stop)
    return run_driver(driver, spark)


def run_driver(driver: MicroBatchLoop, spark: Any) -> int:
    """Run the micro-batch loop to its end, print its summary or why it failed, stop
    Spark; the exit code."""
    # After the SparkContext exists: PySpark installs its own SIGINT handler.
    _stop_on_signals(driver.request_stop)
    code = 0
    try:
        summary = driver.run()
        print(summary.line(), flush=True)
    except KeyboardInterrupt:
        print("interrupted; checkpointed what was done", file=sys.stderr, flush=True)
        code = 130
    except ConfigError as exc:
        print(f"kinesis-spout job: error: {exc}", file=sys.stderr)
        code = 2
    except KinesisSpoutError as exc:
        print(f"kinesis-spout job: failed: {exc}", file=sys.stderr)
        code = 1
    finally:
        # Stopping: later signals (the JVM ends its workers with SIGTERM, and they
        # pass it on) must not interrupt spark.stop().
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        spark.stop()
    return code


def start_spark(config: SpoutConfig, process: str, times: StartupTimes) -> Any:
    """The SparkSession, with the user's processing file shipped to the executors."""
    from pyspark.sql import SparkSession

    times.mark("spark imports")
    spark = SparkSession.builder.appName(f"kinesis-spout {config.job_name}").getOrCreate()
    times.mark("spark session")
    spec_file = process.rpartition(":")[0]
    if spec_file.endswith(".py"):
        spark.sparkContext.addPyFile(str(Path(spec_file).resolve()))
    return spark


def _stop_on_signals(request_stop: Callable[[str], None]) -> None:
    """The first SIGTERM or SIGINT finishes the batch and stops; a second interrupts."""
    signals_seen: list[str] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        signals_seen.append(name)
        if len(signals_seen) == 1:
            # os.write, not print: the main thread may be inside a print.
            os.write(2, f"{name}: finishing the current batch, then stopping\n".encode())
            request_stop(name)
        else:
            raise KeyboardInterrupt(name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


if __name__ == "__main__":
    sys.exit(main())
