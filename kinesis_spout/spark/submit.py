"""``kinesis-spout run``: call ``spark-submit`` on the job file for you.

It validates the config first (a bad value fails in a second, not after Spark has
started), finds ``spark-submit``, points ``PYSPARK_PYTHON`` at this Python and adds quiet
defaults that ``--master`` and ``--spark-conf`` override. ``spark-submit`` runs in a
session of its own with SIGINT and SIGTERM ignored, and the first signal this command
gets goes to the job's Python process alone, so the job finishes its batch and
checkpoints before the JVM goes. The defaults and the signals: docs/spark-job.md.

This module imports nothing from Spark: it only builds a command line.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

from kinesis_spout.config import FIELD_NAMES, SpoutConfig
from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.observability.endpoint import MetricsPortInUseError, check_port_free
from kinesis_spout.spark.launch.deploy import check_deploy_mode
from kinesis_spout.spark.launch.launcher import LAUNCHER_ENV, PIDFILE_ENV, launcher_token
from kinesis_spout.spark.launch.shipenv import PACK_NOW, shipped_env

log = logging.getLogger(__name__)


DEFAULT_MASTER = "local[2]"
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.showConsoleProgress": "false",
    "spark.log.level": "WARN",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    # PySpark's daemon, but a SIGTERM to it stops the job cleanly (worker_daemon.py).
    "spark.python.daemon.module": "kinesis_spout.spark.launch.worker_daemon",
}


class SparkSubmitNotFoundError(KinesisSpoutError):
    """No ``spark-submit`` next to this Python or on ``PATH``."""


def job_file() -> Path:
    """The job file to give ``spark-submit`` (inside the installed package)."""
    return Path(__file__).resolve().with_name("job.py")


def find_spark_submit(explicit: str | None = None) -> str:
    if explicit:
        if not Path(explicit).exists() and shutil.which(explicit) is None:
            raise SparkSubmitNotFoundError(f"--spark-submit {explicit!r}: no such program")
        return explicit
    beside = Path(sys.executable).with_name("spark-submit")
    if beside.exists():
        return str(beside)
    found = shutil.which("spark-submit")
    if found:
        return found
    raise SparkSubmitNotFoundError(
        "spark-submit not found next to this Python or on PATH: "
        "install the spark extra (pip install pyspark), or give --spark-submit PATH"
    )


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``run`` command's own flags (the config flags come from the CLI)."""
    parser.add_argument(
        "--process",
        metavar="MODULE:FUNCTION",
        help="the processing (default: 'process' in the config file)",
    )
    parser.add_argument(
        "--master", default=DEFAULT_MASTER, help=f"Spark master (default {DEFAULT_MASTER})"
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration (repeatable; overrides the defaults)",
    )
    parser.add_argument(
        "--deploy-mode",
        choices=("client", "cluster"),
        default="client",
        help="where the driver runs: here (client, the default) or on the cluster",
    )
    parser.add_argument("--spark-submit", metavar="PATH", help="the spark-submit program")
    parser.add_argument(
        "--ship-env",
        nargs="?",
        const=PACK_NOW,
        metavar="ARCHIVE",
        help="ship this virtualenv to the executors (packed with venv-pack, the 'ship' "
        "extra; or ARCHIVE, packed beforehand): they need only Java and this Python",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the spark-submit command and exit"
    )


def _flag_value(value: object) -> str:
    return str(value)


def build_command(
    args: argparse.Namespace,
    spark_submit: str,
    process: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``spark-submit`` command line for ``args`` (parsed by the ``run``
    parser); ``process`` (resolved from the flags or the file) is passed on; ``extra``
    spark-submit arguments go before the job file (``--ship-env``'s)."""
    conf = dict(DEFAULT_CONF)
    for item in args.spark_conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise KinesisSpoutError(f"--spark-conf {item!r}: expected KEY=VALUE")
        conf[key] = value
    cmd = [spark_submit, "--master", args.master]
    if getattr(args, "deploy_mode", "client") != "client":
        cmd += ["--deploy-mode", args.deploy_mode]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd += extra
    cmd.append(str(job_file()))
    if getattr(args, "config", None):
        cmd += ["--config", str(Path(args.config).resolve())]
    process = process or args.process
    if process:
        cmd += ["--process", process]
    if getattr(args, "verbose", False):
        cmd.append("--verbose")
    for name in FIELD_NAMES:
        value = getattr(args, "cfg_" + name, None)
        if isinstance(value, list):  # a repeatable flag (--stream A --stream B): as given
            flag = "--stream" if name == "streams" else "--" + name.replace("_", "-")
            cmd += [a for v in value for a in (flag, _flag_value(v))]
        elif value is not None:
            cmd += ["--" + name.replace("_", "-"), _flag_value(value)]
    return cmd


def job_environment(
    base: Mapping[str, str] | None = None, master: str = DEFAULT_MASTER
) -> dict[str, str]:
    """The environment for ``spark-submit``: this Python for the driver and
    workers; a local master binds to loopback."""
    env = dict(os.environ if base is None else base)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def supervise(cmd: Sequence[str], env: Mapping[str, str], poll: float = 0.2) -> int:
    """Run ``cmd`` in its own session, forwarding the first SIGINT/SIGTERM to
    the job's Python driver; return its exit code (``128 + n`` if signal ``n``
    killed it, as shells do)."""
    fd, pidfile = tempfile.mkstemp(prefix="kinesis-spout-job-", suffix=".pid")
    os.close(fd)
    os.unlink(pidfile)
    # The job watches this process: if it is killed outright, the job stops too.
    env = {**env, PIDFILE_ENV: pidfile, LAUNCHER_ENV: launcher_token()}
    watched = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in watched}
    # SIGINT stays ignored in the child (the JVM must not die of a stray Ctrl-C under the
    # Python driver); SIGTERM keeps its default, so a SIGTERM sent to the JVM ends the
    # JVM, and the driver, which watches its JVM, stops with a final checkpoint.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        # SIG_IGN is inherited through exec: the JVM then leaves SIGINT/SIGTERM alone.
        proc = subprocess.Popen(list(cmd), env=env, start_new_session=True)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except BaseException:
        for s, h in previous.items():
            signal.signal(s, h)
        raise
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    for s in watched:
        signal.signal(s, on_signal)
    forwarded = 0
    try:
        while True:
            try:
                code = proc.wait(timeout=poll)
                return 128 - code if code < 0 else code
            except subprocess.TimeoutExpired:
                pass
            if len(received) > forwarded:
                forwarded = len(received)
                pid = _read_pid(pidfile)
                if forwarded == 1 and pid is not None:
                    print("stopping the job (finishing its batch) ...", file=sys.stderr)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)
                else:
                    print("killing the job", file=sys.stderr)
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for s, h in previous.items():
            signal.signal(s, h)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pidfile)


def _read_pid(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def check_metrics_port(config: SpoutConfig) -> None:
    """The metrics port is free; when it is not, and the job already runs (most often
    the process holding the port), the error names the job lease's holder instead."""
    try:
        check_port_free(config)
    except MetricsPortInUseError:
        from kinesis_spout.checkpoint.joblease import held_error
        from kinesis_spout.status.sources_store import held_job_lease

        try:
            held = held_job_lease(
                config.checkpoint_store,
                config.job_name,
                zk_auth=config.zk_auth,
                region=config.region,
                profile=config.profile,
                role=config.assumed_role,
            )
        except KinesisSpoutError:
            held = None  # the store cannot say: the port is the error
        if held is not None:
            raise held_error(config.job_name, held.holder or "?", held.where) from None
        raise


def cmd_run(args: argparse.Namespace) -> int:
    """``kinesis-spout run``: validate, then ``spark-submit`` the job."""
    from kinesis_spout.spark.job import job_config

    config, process = job_config(args)
    if not process:
        raise KinesisSpoutError(
            "no processing given: --process module:function, or process = ... in the config file"
        )
    conf = dict(item.partition("=")[::2] for item in args.spark_conf)
    deploy_mode = conf.get("spark.submit.deployMode", args.deploy_mode)
    check_deploy_mode(config, deploy_mode)
    if deploy_mode == "client":  # the driver's endpoint will listen here
        check_metrics_port(config)
    spark_submit = find_spark_submit(args.spark_submit)
    ship = getattr(args, "ship_env", None)
    with shipped_env(ship, deploy_mode, dry_run=args.dry_run) as extra:
        cmd = build_command(args, spark_submit, process, extra)
        if args.dry_run:
            print(" ".join(cmd))
            return 0
        log.info("job %s: %s", config.job_name, " ".join(cmd))
        return supervise(cmd, job_environment(master=args.master))
