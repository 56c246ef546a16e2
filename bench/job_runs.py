"""The Spark job run as a user runs it, for ``spark_bench.py --shards``: a TOML file and
``kinesis-spout run --config job.toml`` (spark-submit, ``local[2]``) in a subprocess, its
output read line by line, the CPU time of its whole process tree (:mod:`proctree`).

The processing is a per-record no-op in a file of its own (``--process file.py:process``)
that writes the wall time of its first call to a file: when the first record reached the
user's function. A bare PySpark run (:func:`bare_pyspark_seconds`) is the baseline of
that start-up time.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from proctree import TreeCpu

from kinesis_spout.config import SpoutConfig
from kinesis_spout.config.load import to_toml
from kinesis_spout.spark.submit import job_environment
from kinesis_spout.testing.processes import OutputLines

MASTER = "local[2]"
JOB_KEYS = (
    "stream_name",
    "job_name",
    "endpoint_url",
    "checkpoint_store",
    "dead_letter",
    "read_on",
    "stop_when_idle",
)
"""What the job's TOML file sets; every other setting is the library's default."""
PROCESS_FILE = '''"""The bench's per-record function: nothing, but the first call's wall time is
written to FIRST (once per run: O_EXCL)."""
import os
import time

FIRST = {first!r}
_called = False


def process(record):
    global _called
    if _called:
        return None
    _called = True
    try:
        fd = os.open(FIRST, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return None
    os.write(fd, repr(time.time()).encode())
    os.close(fd)
    return None
'''
BANNER = "kinesis-spout job '"
"""The job's banner: printed once its Spark session is up, just before its micro-batch
loop is built (the stream opens while the session starts, or next)."""
EVENT_LOG_CONF = ("spark.eventLog.compress=false", "spark.eventLog.rolling.enabled=false")
"""Spark 4 compresses (zstd) and rolls event logs by default: one plain JSON-lines file."""
SUMMARY = re.compile(
    r"^stopped \((?P<why>.*)\) after (?P<batches>\d+) batches: (?P<done>\d+) "
    r"done.* (?P<rps>[\d,.]+) records done/s of processing"
    r"(?: \| (?P<empty>\d+) more micro-batches read nothing)?"
)
PROGRESS = re.compile(
    r"^batch \d+: .*\| ok (?P<ok>\d+) \|.*\| dead-lettered (?P<dead>\d+)"
    r".*\| (?P<rate>[\d,]+) done records/s$"
)
BARE_JOB = """
import sys, time
from pyspark.sql import SparkSession
spark = SparkSession.builder.master(sys.argv[1]).appName("bare").getOrCreate()
spark.sparkContext.parallelize([1]).count()
print("counted", repr(time.time()), flush=True)
spark.stop()
"""


@dataclass(frozen=True, slots=True)
class JobRun:
    """One run of the job: its output and timings (wall clock, ``time.time()``)."""

    lines: list[str]
    times: list[float]
    """When each line arrived here."""
    launched: float
    first_record: float | None
    """When the function was first called (None: no record reached it)."""
    banner: float | None
    """When the job printed its banner (its Spark session is up, :data:`BANNER`)."""
    stopped: float | None
    """When we sent SIGTERM (None: it stopped by itself)."""
    ended: float
    cpu_seconds: float
    """The whole process tree: launcher, JVM, Python driver, Python workers."""
    window_cpu_seconds: float | None
    """The tree's sampled CPU from ``banner`` to ``stopped``."""

    @property
    def wall_seconds(self) -> float:
        return self.ended - self.launched

    def summary(self) -> re.Match[str]:
        for line in reversed(self.lines):
            if m := SUMMARY.match(line):
                return m
        raise RuntimeError("the job printed no summary line:\n" + "".join(self.lines[-40:]))

    @property
    def records_per_second(self) -> float:
        """The job's own figure: records done per second of processing (summary line)."""
        return float(self.summary()["rps"].replace(",", ""))

    def micro_batches(self) -> int:
        """Micro-batches the job ran, those that read nothing included (summary line)."""
        m = self.summary()
        return int(m["batches"]) + int(m["empty"] or 0)

    def batches(self) -> list[tuple[float, int]]:
        """Per progress line (micro-batch): when it arrived, and its records done."""
        return [
            (t, int(m["ok"]) + int(m["dead"]))
            for line, t in zip(self.lines, self.times, strict=True)
            if (m := PROGRESS.match(line))
        ]

    def batch_windows(self) -> list[tuple[float, float]]:
        """Per micro-batch with a progress line: when it started and ended, as here (its
        line's arrival, less its wall time: records done over its records done/s)."""
        windows = []
        for line, t in zip(self.lines, self.times, strict=True):
            if m := PROGRESS.match(line):
                done, rate = int(m["ok"]) + int(m["dead"]), int(m["rate"].replace(",", ""))
                windows.append((t - done / rate if rate else t, t))
        return windows

    def warm_records_per_second(self) -> float | None:
        """Records done per second from the first progress line (the first micro-batch
        starts the Python workers) to the last, as the lines arrived here; None with a
        single micro-batch."""
        batches = self.batches()
        seconds = batches[-1][0] - batches[0][0] if batches else 0.0
        return sum(d for _, d in batches[1:]) / seconds if seconds > 0 else None

    def wall_records_per_second(self) -> float | None:
        """Records done per second from the job's banner (its Spark session is up) to its
        last progress line, as they arrived here (None: no such lines)."""
        batches = self.batches()
        lines = zip(self.lines, self.times, strict=True)
        banner = next((t for line, t in lines if BANNER in line), None)
        if not batches or banner is None or batches[-1][0] <= banner:
            return None
        return sum(d for _, d in batches) / (batches[-1][0] - banner)


class TimedLines(OutputLines):
    """:class:`OutputLines` that also notes when each line arrived (``times``)."""

    def __init__(self, proc: subprocess.Popen[str], name: str) -> None:
        self.times: list[float] = []
        super().__init__(proc, name)

    def _read(self, stream: IO[str]) -> None:
        try:
            for line in stream:
                with self._cond:
                    self._lines.append(line)
                    self.times.append(time.time())
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._ended = True
                self._cond.notify_all()

    def timed(self, timeout: float = 30.0) -> tuple[list[str], list[float]]:
        """Every line and when it arrived, once the output ended."""
        self.text(timeout)
        with self._cond:
            return list(self._lines), list(self.times)


def job_dir(base: Path, name: str) -> Path:
    path = base / f"{name}-{time.monotonic_ns()}"
    path.mkdir(parents=True)
    return path


def write_job(
    workdir: Path,
    stream: str,
    endpoint: str,
    *,
    stop_when_idle: float,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """The job's TOML file and its processing file under ``workdir`` (fresh checkpoints and
    dead letters there): executor reads, ``extra`` config values, the library's defaults
    otherwise."""
    fn = workdir / "bench_noop.py"
    fn.write_text(PROCESS_FILE.format(first=str(workdir / "first-record")))
    extra = dict(extra or {})
    cfg = SpoutConfig(
        stream_name=stream,
        job_name=workdir.name,
        endpoint_url=endpoint,
        checkpoint_store=f"file://{workdir / 'checkpoints'}",
        dead_letter=str(workdir / "dead-letter"),
        read_on="executors",
        stop_when_idle=stop_when_idle,
        **extra,
    )
    toml = workdir / "job.toml"
    toml.write_text(f'process = "{fn}:process"\n' + to_toml(cfg, (*JOB_KEYS, *extra)))
    return toml


def run_command(toml: Path, spark_conf: dict[str, str]) -> list[str]:
    """``kinesis-spout run`` as the README gives it (the console script of this Python)."""
    script = Path(sys.executable).with_name("kinesis-spout")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "kinesis_spout.cli"]
    cmd += ["run", "--config", str(toml), "--master", MASTER]
    for key, value in spark_conf.items():
        cmd += ["--spark-conf", f"{key}={value}"]
    return cmd


def event_log_conf(directory: Path) -> dict[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(directory)}
    return conf | dict(item.split("=", 1) for item in EVENT_LOG_CONF)


def count_job_starts(directory: Path) -> int:
    """SparkListenerJobStart events in the event logs under ``directory``."""
    marker = '"Event":"SparkListenerJobStart"'
    return sum(
        1
        for p in directory.rglob("*")
        if p.is_file()
        for line in p.read_text().splitlines()
        if marker in line
    )


def run_job(
    toml: Path,
    *,
    spark_conf: dict[str, str] | None = None,
    stop_after: float | None = None,
    stop_at_first_record: bool = False,
    timeout: float = 900.0,
) -> JobRun:
    """Launch the job and wait for it to exit. ``stop_after``: SIGTERM that many seconds
    after its banner (its Spark session is up); ``stop_at_first_record``: SIGTERM once a
    record reached the function. Else it stops by itself (``stop_when_idle``)."""
    first_file = toml.parent / "first-record"
    launched = time.time()
    proc = subprocess.Popen(
        run_command(toml, spark_conf or {}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    out = TimedLines(proc, f"the job ({toml})")
    banner = stopped = window = None
    with TreeCpu(proc.pid) as cpu:
        try:
            if stop_after is not None:
                out.wait_for(BANNER, timeout)
                banner, cpu0 = time.time(), cpu.sampled()
                time.sleep(stop_after)
                window, stopped = cpu.sampled() - cpu0, time.time()
                proc.send_signal(signal.SIGTERM)
            elif stop_at_first_record:
                _wait_for_file(first_file, proc, timeout)
                stopped = time.time()
                proc.send_signal(signal.SIGTERM)
            proc.wait(timeout)
        finally:
            _end(proc)
    ended = time.time()
    lines, times = out.timed()
    if proc.returncode != 0:
        raise RuntimeError(f"the job exited with {proc.returncode}:\n" + "".join(lines[-40:]))
    first = float(first_file.read_text()) if first_file.exists() else None
    return JobRun(lines, times, launched, first, banner, stopped, ended, cpu.seconds, window)


def _wait_for_file(path: Path, proc: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no record reached the function ({path} not written)")
        time.sleep(0.02)


def _end(proc: subprocess.Popen[str]) -> None:
    """A job still running (an error above): SIGTERM, then SIGKILL to the launcher (the job
    watches it and stops)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(60)


def bare_pyspark_seconds(timeout: float = 600.0) -> float:
    """Seconds from launching a Python that starts a local[2] SparkSession to its
    ``parallelize([1]).count()`` done (one Python task run on a Python worker)."""
    launched = time.time()
    done = subprocess.run(
        [sys.executable, "-c", BARE_JOB, MASTER],
        env=job_environment(master=MASTER),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("counted "):
            return float(line.split()[1]) - launched
    raise RuntimeError(f"the bare PySpark run failed ({done.returncode}):\n{done.stderr[-3000:]}")
