"""The scale-out figures of ``spark_bench.py --cluster``.

On a standalone cluster of
two 1-core workers started from PySpark's jars:

* ``driver_cpu_us_per_record``: CPU time of the driver process (this Python
  process: user + system, all threads) per record, batch 10,000, no-op function,
  from the start of the run to the progress line of the last record (like the
  records/s, without the idle wait before ``stop_when_idle`` stops the run);
* ``reader_processes``: distinct processes that called GetRecords;
* ``scaling_2_vs_1``: records/s with two workers over one worker (the app
  gets ``spark.cores.max`` 2, then 1), on a CPU-bound function (~200 µs of
  pure-Python work per record);
* ``lost`` / ``duplicates``: from a delivery log every executor appends each
  processed message id to (one file per process), over every measured run;
* executor reads only: ``driver_cpu_us_per_record_<style>``, the driver CPU per record
  of the DataFrame styles on two workers (``styles``: the transform and the word-count
  fan-out of ``spark_styles``), measured as for the per-record function (after a
  warm-up run of the same style): the median of ``STYLE_RUNS`` runs, each run's in
  ``driver_cpu_us_per_record_<style>_runs``.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from devkit.cluster import StandaloneCluster, cluster_spark_conf
from devkit.spark import bench_job_config, local_spark_session
from kinesis_spout.spark.launch.build import build_driver
from kinesis_spout.spark.process.styles import InputRecord

BURN_US = 200.0
STYLE_RUNS = 3
"""Runs of each DataFrame style whose driver CPU per record is measured (the median is
the figure): a micro-batch costs the driver about the same whatever its size, so one
run's figure moves with how the stream's records fall into micro-batches."""


def _calibrate() -> int:
    """Loop iterations of :func:`burn` that take about ``BURN_US`` µs here."""
    n = 20_000
    t = time.perf_counter()
    _spin(n)
    per = (time.perf_counter() - t) / n
    return max(1, int(BURN_US * 1e-6 / per))


def _spin(n: int) -> int:
    x = 0
    for i in range(n):
        x += i * i
    return x


def logging_function(log_dir: str, spins: int) -> Any:
    """A per-record function: ``spins`` loop iterations, then the message id appended
    to ``<log_dir>/<pid>.log`` (O_APPEND, one write per record)."""
    fds: dict[int, int] = {}

    def process(record: InputRecord) -> None:
        if spins:
            _spin(spins)
        pid = os.getpid()
        fd = fds.get(pid)
        if fd is None:
            fd = fds[pid] = os.open(
                os.path.join(log_dir, f"{pid}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND
            )
        os.write(fd, f"{record.shard_id}:{record.sequence_number}\n".encode())

    return process


def delivery_counts(log_dir: Path) -> Counter[str]:
    seen: Counter[str] = Counter()
    for p in log_dir.glob("*.log"):
        seen.update(p.read_text().split())
    return seen


def cluster_run(
    spark: Any, endpoint: str, tmp: Path, stream: str, mode: str, spins: int, total: int
) -> dict[str, Any]:
    """One run over the whole stream; records/s, driver CPU, readers, deliveries."""
    log_dir = tmp / f"log-{time.monotonic_ns()}"
    log_dir.mkdir()
    cfg = bench_job_config(stream, endpoint, tmp, f"scale-{mode}-{time.monotonic_ns()}")
    last: list[tuple[float, float]] = []  # (time, driver CPU) at each progress line
    driver = build_driver(
        cfg,
        logging_function(str(log_dir), spins),
        spark=spark,
        progress=lambda r: last.append((time.perf_counter(), _cpu())),
    )
    cpu0 = _cpu()
    start = time.perf_counter()
    summary = driver.run()
    end, cpu1 = last[-1] if last else (time.perf_counter(), _cpu())
    elapsed = end - start  # to the last record done (not the idle wait before the stop)
    cpu = cpu1 - cpu0
    readers = len(driver.planner.readers)
    seen = delivery_counts(log_dir)
    return {
        "rps": summary.ok / elapsed if elapsed > 0 else 0.0,
        "cpu_us_per_record": 1e6 * cpu / max(summary.ok, 1),
        "readers": readers,
        "lost": max(0, total - len(seen)),
        "duplicates": sum(seen.values()) - len(seen),
        "ok": summary.ok,
    }


def style_cpu_run(
    spark: Any, endpoint: str, tmp: Path, stream: str, process: Any, total: int
) -> float:
    """Driver CPU µs per record of one executor-read run of a transform or fan-out."""
    cfg = bench_job_config(stream, endpoint, tmp, f"scale-style-{time.monotonic_ns()}")
    last: list[float] = []
    driver = build_driver(cfg, process, spark=spark, progress=lambda r: last.append(_cpu()))
    cpu0 = _cpu()
    summary = driver.run()
    if summary.ok != total:
        raise RuntimeError(f"{stream}: acked {summary.ok} of {total} records")
    return 1e6 * ((last[-1] if last else _cpu()) - cpu0) / total


def style_cpu_figures(
    spark: Any, endpoint: str, tmp: Path, styles: dict[str, Style]
) -> dict[str, Any]:
    """Per style: a warm-up run, then the median driver CPU per record of
    ``STYLE_RUNS`` runs (and each run's)."""
    out: dict[str, Any] = {}
    for key, (name, process, n) in styles.items():
        style_cpu_run(spark, endpoint, tmp, name, process, n)  # warm-up
        runs = [style_cpu_run(spark, endpoint, tmp, name, process, n) for _ in range(STYLE_RUNS)]
        out[f"driver_cpu_us_per_record_{key}"] = round(statistics.median(runs), 2)
        out[f"driver_cpu_us_per_record_{key}_runs"] = [round(x, 2) for x in runs]
    return out


def _cpu() -> float:
    """CPU seconds of this process so far (user + system, every thread)."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def _session(cluster: StandaloneCluster, cores: int, name: str) -> Any:
    conf = cluster_spark_conf(cluster)
    conf["spark.cores.max"] = str(cores)
    master = conf.pop("spark.master")
    return local_spark_session(name, master=master, **conf)


Style = tuple[str, Any, int]
"""A DataFrame style's run: its stream, its processing and the records in the stream."""


def scale_figures(
    endpoint: str,
    tmp: Path,
    stream: str,
    cpu_stream: str,
    total: int,
    cpu_total: int,
    styles: dict[str, Style] | None = None,
) -> dict[str, dict[str, Any]]:
    """The figures of both read modes on a two-worker cluster (see the module doc)."""
    spins = _calibrate()
    out: dict[str, dict[str, Any]] = {}
    with StandaloneCluster(workers=2) as cluster:
        for mode in ("executors",):
            runs: list[dict[str, Any]] = []
            rps: dict[int, float] = {}
            style_cpu: dict[str, Any] = {}
            for cores in (2, 1):
                spark = _session(cluster, cores, f"scale-{mode}-{cores}")
                try:
                    if cores == 2:
                        cluster_run(spark, endpoint, tmp, stream, mode, 0, total)  # warm-up
                        runs.append(cluster_run(spark, endpoint, tmp, stream, mode, 0, total))
                        if mode == "executors":
                            style_cpu = style_cpu_figures(spark, endpoint, tmp, styles or {})
                    r = cluster_run(spark, endpoint, tmp, cpu_stream, mode, spins, cpu_total)
                    runs.append(r)
                    rps[cores] = r["rps"]
                finally:
                    spark.stop()
            out[mode] = {
                "driver_cpu_us_per_record": round(runs[0]["cpu_us_per_record"], 2),
                "reader_processes": runs[0]["readers"],
                "scaling_2_vs_1": round(rps[2] / rps[1], 3),
                "rps_cpu_bound_2": round(rps[2]),
                "rps_cpu_bound_1": round(rps[1]),
                "records": sum(r["ok"] for r in runs),
                "lost": sum(r["lost"] for r in runs),
                "duplicates": sum(r["duplicates"] for r in runs),
            } | style_cpu
    return out


def print_scale(scale: dict[str, dict[str, Any]]) -> None:
    """Each read mode's cluster figures (:func:`scale_figures`), against their goals."""
    for mode, figures in scale.items():
        print(
            f"{mode} reads on the cluster: driver CPU "
            f"{figures['driver_cpu_us_per_record']:.2f} us/record (goal <= 2.0), "
            f"{figures['reader_processes']} reader processes (goal >= 2), 2 vs 1 worker "
            f"{figures['scaling_2_vs_1']:.2f}x (goal >= 1.5), lost {figures['lost']}, "
            f"duplicates {figures['duplicates']} of {figures['records']} records"
        )
        for key in ("transform", "fanout"):
            cpu = figures.get(f"driver_cpu_us_per_record_{key}")
            if cpu is not None:
                each = figures.get(f"driver_cpu_us_per_record_{key}_runs", [])
                print(
                    f"  {key} on the cluster: driver CPU {cpu:.2f} us/record (goal <= 2.0; "
                    f"median of runs {', '.join(f'{x:.2f}' for x in each)})"
                )
