"""The DataFrame styles with executor reads, against a plain boto3 loop on the same stream.

Part of ``bench/spark_bench.py`` (its local ``local[2]`` session and moto server):

* **transform**: a DataFrame transform that passes every record (``_row`` and a
  ``True`` status) on the bench's stream of random payloads;
* **fan-out**: the word count (:mod:`kinesis_spout.examples.wordcount`: each sentence
  split into words on the executors, anchored with Storm's XOR acker, counted by a
  sink writing Parquet) on a stream of as many sentence records (no poison).

Each job reads the whole stream on the executors (batch 10,000); records/s from the
start of the run to the ack of the last record, over the boto3 loop's on the same
stream, run just before. A job that runs for hours runs warm: each style is run
:data:`WARM_UPS` times first (its plans compiled, the JVM's JIT warm), then
:data:`RUNS` times measured, and the figures are the medians.

With each ratio, the machine's CPU per record during the job's run (every process:
the emulator, Spark's JVM, its Python workers and this driver; Linux ``/proc/stat``,
less the time the host took from this virtual machine, printed apart as *steal*)
and the **ceiling** that puts on the ratio: the job cannot go faster than all the
machine's cores busy with it, so ``{style}_ceiling_vs_boto3`` is ``cores`` times the
boto3 loop's seconds per record over the job's CPU per record. A ratio near its
ceiling is bound by the cores, not by waiting.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devkit.spark import bench_job_config
from kinesis_spout.examples.wordcount import WordCountSink, sample_records, split_sentence
from kinesis_spout.spark.launch.build import run_job
from kinesis_spout.spark.process.styles import Processor, dataframe_transform, fan_out
from kinesis_spout.testing.streams import create_stream, put_records

WORDS_STREAM = "bench-spark-words"
WARM_UPS = 10
"""Runs of each style before the measured ones: the first runs of a session compile
its plans and warm the JVM's JIT. The JIT goes on compiling for longer than Spark's
code generation: on the word count (40,000 records, ``local[2]``), the JVM spent
12.9 s compiling methods in a session's first run, 4.5 in its third, 3.6 in its
fourth, 1.8-2.0 in its tenth to thirteenth and 1.0-1.2 in its fifteenth to
twentieth (``CompilationMXBean``; Spark generated no code after the first run),
on 2 cores that the run needs; the runs went from 7,500-7,800 records/s (third to
fifth) to 9,000-9,900 (tenth on). After three warm-ups the figures were those of a
JVM still warming up."""
RUNS = 5
"""Measured runs of each style, each after its own boto3 loop: the figures are their
medians (each run's ratio in ``{style}_vs_boto3_runs``). Five: one run's ratio moves by
±10% with the hour (the loop's and the job's own speed both do), more than the goals'
margins, and the median of three still swung by that much from one bench to the next."""


def pass_all(df: Any) -> Any:
    """The transform: every record ok (the figures are the framework's cost)."""
    from pyspark.sql import functions as F

    return df.select("_row", F.lit(True).alias("status"))


def machine_seconds() -> tuple[float, float]:
    """CPU seconds since boot the whole machine has spent busy, and those the host took
    from it (``/proc/stat``'s *steal*: a virtual CPU that wanted to run while the
    hypervisor ran something else). Steal is not the job's CPU, so it is not in busy."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    busy = sum(ticks[:7]) - ticks[3] - ticks[4]  # user .. softirq, less idle and iowait
    return busy / hz, ticks[7] / hz


def style_run(
    spark: Any, endpoint: str, tmp: Path, stream: str, process: Processor, total: int
) -> float:
    """Records/s of one executor-read job over the whole stream."""
    name = f"bench-style-{time.monotonic_ns()}"
    cfg = bench_job_config(stream, endpoint, tmp, name, batch=10_000)
    acked: list[float] = []
    start = time.perf_counter()
    summary = run_job(
        cfg, process, spark=spark, progress=lambda r: acked.append(time.perf_counter())
    )
    if summary.ok != total:
        raise RuntimeError(f"{stream}: acked {summary.ok} of {total} records")
    return total / (acked[-1] - start)


def cluster_styles(tmp: Path, stream: str, records: int) -> dict[str, tuple[str, Any, int]]:
    """The styles ``--cluster`` measures: the transform on ``stream``, the word count on
    :data:`WORDS_STREAM` (both made by :func:`style_figures`, ``records`` records each)."""
    words = fan_out(split_sentence, "word string", [WordCountSink(tmp / "counts")], "wordcount")
    return {
        "transform": (stream, dataframe_transform(pass_all), records),
        "fanout": (WORDS_STREAM, words, records),
    }


def style_figures(
    spark: Any,
    client: Any,
    endpoint: str,
    tmp: Path,
    stream: str,
    records: int,
    boto3_loop: Callable[[Any, str, int], float],
    plain_client: Any,
) -> dict[str, Any]:
    """``transform_vs_boto3`` and ``fanout_vs_boto3`` (and their records/s), printed:
    each the median of :data:`RUNS` runs, after :data:`WARM_UPS` (see the module)."""
    create_stream(client, WORDS_STREAM, 4)
    put_records(client, WORDS_STREAM, sample_records(0, records, poison_every=0))
    transform = dataframe_transform(pass_all)
    words = fan_out(split_sentence, "word string", [WordCountSink(tmp / "counts")], "wordcount")
    out: dict[str, Any] = {}
    cores = len(os.sched_getaffinity(0))
    for key, name, process in (
        ("transform", stream, transform),
        ("fanout", WORDS_STREAM, words),
    ):
        for _ in range(WARM_UPS):
            style_run(spark, endpoint, tmp, name, process, records)
        runs = [
            _measured_run(spark, endpoint, tmp, name, process, records, boto3_loop, plain_client)
            for _ in range(RUNS)
        ]
        ratio, rps, boto, cpu_us, steal_us = (statistics.median(x) for x in zip(*runs, strict=True))
        ceiling = cores * 1e6 / boto / cpu_us
        out[f"job_rps_{key}"] = round(rps)
        out[f"{key}_vs_boto3"] = round(ratio, 3)
        out[f"{key}_vs_boto3_runs"] = [round(r[0], 3) for r in runs]
        out[f"{key}_cpu_us_per_record"] = round(cpu_us, 1)
        out[f"{key}_steal_us_per_record"] = round(steal_us, 1)
        out[f"{key}_ceiling_vs_boto3"] = round(ceiling, 3)
        print(
            f"job, executor reads, {key}: {rps:>8,.0f} records/s, {ratio:.2f}x the "
            f"boto3 loop on its stream ({boto:,.0f} records/s; runs "
            f"{', '.join(f'{r[0]:.2f}x' for r in runs)}); {cpu_us:.0f} us of machine CPU "
            f"per record: at most {ceiling:.2f}x on {cores} cores (the host took "
            f"{steal_us:.0f} us per record more)"
        )
    return out


def _measured_run(
    spark: Any,
    endpoint: str,
    tmp: Path,
    stream: str,
    process: Processor,
    records: int,
    boto3_loop: Callable[[Any, str, int], float],
    plain_client: Any,
) -> tuple[float, float, float, float, float]:
    """The boto3 loop, then the job: (ratio, job records/s, loop records/s, machine CPU
    µs per record during the job, steal µs per record)."""
    boto = boto3_loop(plain_client, stream, records)
    busy, steal = machine_seconds()
    rps = style_run(spark, endpoint, tmp, stream, process, records)
    busy_after, steal_after = machine_seconds()
    cpu_us = 1e6 * (busy_after - busy) / records
    steal_us = 1e6 * (steal_after - steal) / records
    return rps / boto, rps, boto, cpu_us, steal_us
