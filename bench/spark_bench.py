"""End-to-end throughput of the Spark job, against a plain boto3 loop.

Starts a moto server, puts ``--records`` records of ``--size`` bytes into a
4-shard stream, then in one process:

* **boto3 ceiling**: a plain loop with a stock boto3 client (GetShardIterator
  TRIM_HORIZON, then GetRecords with Limit 10000 round-robin over the shards
  until every record is read), run before and after the job runs; the mean is
  the ceiling;
* **the job** (:func:`kinesis_spout.spark.launch.build.run_job`, per-record
  no-op function, file checkpoints, local[2] Spark) reading the whole
  stream from TRIM_HORIZON at batch sizes 1,000, 10,000 and 50,000:
  records/s from the start of the run to the ack of the last record,
  ``ratio_vs_boto3_<batch>`` over the boto3 ceiling; ``vs_boto3`` is the median of
  ``RUNS`` more runs at 10,000, each over a boto3 loop run just before it
  (``vs_boto3_runs``): one run's ratio moves with the hour;
* **the DataFrame styles** (``bench/spark_styles.py``): a
  transform and the word-count fan-out, ``transform_vs_boto3`` and ``fanout_vs_boto3``
  over the boto3 loop on their streams (medians of 5 runs after 10 warm-ups), each
  with the machine's CPU per record (``*_cpu_us_per_record``) and the ratio the cores
  allow (``*_ceiling_vs_boto3``);
* with ``--cluster``: the scale-out figures on a standalone cluster of two 1-core
  workers (see ``bench/spark_scale.py``): ``driver_cpu_us_per_record``,
  ``reader_processes``, ``scaling_2_vs_1``, ``records``/``lost``/``duplicates``.
* instead, with ``--shards 4,32,128``: the shard-scaling figures of the job run by
  ``kinesis-spout run`` (see ``bench/spark_shards.py``);
* instead, with ``--streams 4``: the job over 4 streams against 1 stream of as many
  shards, and the fairness of its reads (see ``bench/spark_streams.py``).

Spark starts once and is warmed up before the timed runs. Each job run uses
a fresh job name (fresh checkpoints). With ``--json`` the last line is one
JSON object (``job_rps_10k``, ``boto3_rps``, ``ratio_vs_boto3_10k`` ...).
``--plot FILE`` also draws the figures as a PNG bar chart (the ``plots`` extra).

    python bench/spark_bench.py [--records 100000] [--size 200] [--cluster] [--json] [--plot FILE]
    python bench/spark_bench.py --shards 4,32,128 [--records 40000] [--json]
    python bench/spark_bench.py --streams 4 [--records 40000] [--json]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from devkit.plots import (  # noqa: E402
    Bar,
    BarChart,
    Panel,
    Series,
    add_plot_argument,
    check_plot_argument,
    finish_bench,
)
from devkit.spark import bench_job_config, local_spark_session  # noqa: E402
from kinesis_spout.spark.launch.build import run_job  # noqa: E402
from kinesis_spout.spark.process.styles import InputRecord, per_record  # noqa: E402
from kinesis_spout.spark.reports import BatchReport  # noqa: E402
from kinesis_spout.testing.servers import MotoServer  # noqa: E402
from kinesis_spout.testing.streams import emulator_client, fill_stream  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import poison_bench  # noqa: E402
import spark_scale  # noqa: E402
import spark_shards  # noqa: E402
import spark_streams  # noqa: E402
import spark_styles  # noqa: E402
from reader_bench import stock_client  # noqa: E402
from spark_scale import scale_figures  # noqa: E402
from spark_styles import RUNS, style_figures  # noqa: E402

SHARDS = 4
STREAM = "bench-spark"
CPU_STREAM = "bench-spark-cpu"
BATCH_SIZES = (1_000, 10_000, 50_000)


_MODES = (Bar("the job", ""),)
CHART = BarChart(
    "spark_bench: the Spark job, {records:,} records of {record_bytes} B in {shards} shards, "
    "moto server",
    (
        Panel(
            "throughput, local[2]",
            "records/s (higher is better)",
            (
                Bar("boto3 GetRecords loop", "boto3_rps", baseline=True),
                Bar("batch 1,000", "job_rps_1k"),
                Bar("batch 10,000", "job_rps_10k"),
                Bar("batch 50,000", "job_rps_50k"),
            ),
        ),
        Panel(
            "standalone cluster, 2 workers",
            "µs of driver CPU per record (lower is better)",
            _MODES,
            (Series("", "{}driver_cpu_us_per_record"),),
            optional=True,
        ),
        Panel(
            "scaling, 2 workers vs 1",
            "records/s with 2 workers ÷ with 1",
            _MODES,
            (Series("", "{}scaling_2_vs_1"),),
            optional=True,
        ),
    ),
    note="batch 10,000: {vs_boto3:.2f}x the boto3 loop",
)
"""The chart ``--plot FILE`` draws (the cluster panels with ``--cluster``)."""


def noop(record: InputRecord) -> None:
    """The user's function: nothing, so the figures are the framework's cost."""
    return None


def boto3_loop(client: Any, total: int, stream: str = STREAM) -> float:
    """Records/s of a plain GetRecords loop reading the whole stream once."""
    shards = [s["ShardId"] for s in client.list_shards(StreamName=stream)["Shards"]]
    start = time.perf_counter()
    its = {
        s: client.get_shard_iterator(
            StreamName=stream, ShardId=s, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for s in shards
    }
    read = 0
    done: set[str] = set()
    while len(done) < len(shards):
        for s in shards:
            if s in done:
                continue
            resp = client.get_records(ShardIterator=its[s], Limit=10_000)
            read += len(resp["Records"])
            its[s] = resp["NextShardIterator"]
            if not resp["Records"] and resp.get("MillisBehindLatest", 0) == 0:
                done.add(s)
    elapsed = time.perf_counter() - start
    if read != total:
        raise RuntimeError(f"boto3 loop read {read} records, expected {total}")
    return read / elapsed


def job_run(spark: Any, endpoint: str, tmp: Path, batch: int, total: int) -> dict[str, float]:
    """One job run over the whole stream; its throughput and per-batch figures."""
    name = f"bench-{batch}-{time.monotonic_ns()}"
    cfg = bench_job_config(STREAM, endpoint, tmp, name, batch=batch)
    reports: list[tuple[float, BatchReport]] = []
    start = time.perf_counter()
    summary = run_job(
        cfg,
        per_record(noop),
        spark=spark,
        progress=lambda r: reports.append((time.perf_counter(), r)),
    )
    if summary.ok != total:
        raise RuntimeError(f"batch {batch}: acked {summary.ok} of {total} records")
    elapsed = reports[-1][0] - start  # to the ack of the last record (not the idle wait)
    return {
        "rps": total / elapsed,
        "seconds": elapsed,
        "batches": len(reports),
        "spark_ms_per_batch": 1000 * statistics.mean(r.process_seconds for _, r in reports),
        "fill_ms_per_batch": 1000
        * statistics.mean(r.seconds - r.process_seconds for _, r in reports),
    }


Scale = dict[str, dict[str, Any]]
"""``--cluster``: ``spark_scale``'s figures (under ``executors``)."""


@dataclass(frozen=True, slots=True)
class LocalRuns:
    """What the local[2] session measured, before rounding into figures."""

    boto_before: float
    boto_after: float
    """The boto3 loop's records/s before and after the job runs."""
    batches: dict[int, dict[str, float]]
    """Per batch size: :func:`job_run`."""
    styles: dict[str, Any]
    """``spark_styles.style_figures``: the transform and the fan-out."""
    paired: list[float]
    """The job at 10,000 over a boto3 loop run just before it, ``RUNS`` times."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, help="default 100,000 (per mode: see below)")
    parser.add_argument("--size", type=int, default=200, help="bytes per record")
    parser.add_argument("--json", action="store_true", help="one JSON object on the last line")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="also the scale-out figures on a standalone cluster of two 1-core workers",
    )
    parser.add_argument("--cpu-records", type=int, default=16_000, help="CPU-bound runs' records")
    parser.add_argument(
        "--poison-rate",
        type=float,
        default=None,
        help="instead: throughput with this fraction of poison records vs none "
        "(bench/poison_bench.py; --records defaults to 20,000 there)",
    )
    spark_shards.add_shards_arguments(parser)
    parser.add_argument(
        "--streams",
        type=int,
        metavar="N",
        help="instead: the job over N streams of 2 shards against 1 stream of 2N shards "
        "(bench/spark_streams.py; --records defaults to 40,000 there)",
    )
    add_plot_argument(parser)
    args = parser.parse_args(argv)
    if args.streams is not None and args.streams < 2:
        parser.error(f"--streams {args.streams}: at least 2")
    if args.records is None:
        few = args.shards or args.streams
        args.records = 20_000 if args.poison_rate else 40_000 if few else 100_000
    check_plot_argument(parser, args.plot)
    return args


def local_runs(spark: Any, endpoint: str, tmp: Path, records: int, client: Any) -> LocalRuns:
    """The boto3 loop, the job at each batch size, the loop again, each printed (after a
    warm-up run of the job)."""
    job_run(spark, endpoint, tmp, 10_000, records)  # warm-up
    plain = stock_client(endpoint)  # boto3 as anyone makes it
    boto_before = boto3_loop(plain, records)
    print(f"boto3 GetRecords loop: {boto_before:,.0f} records/s")
    runs: dict[int, dict[str, float]] = {}
    for batch in BATCH_SIZES:
        runs[batch] = r = job_run(spark, endpoint, tmp, batch, records)
        print(
            f"job, batch {batch:>6,}: {r['rps']:>8,.0f} records/s "
            f"({r['batches']:.0f} batches, Spark {r['spark_ms_per_batch']:.0f} ms "
            f"+ fill {r['fill_ms_per_batch']:.0f} ms per batch)"
        )
    boto_after = boto3_loop(plain, records)
    print(f"boto3 GetRecords loop again: {boto_after:,.0f} records/s")
    paired = []
    for _ in range(RUNS):
        loop = boto3_loop(plain, records)
        paired.append(job_run(spark, endpoint, tmp, 10_000, records)["rps"] / loop)
    print("job at 10,000 over a boto3 loop just before: " + ", ".join(f"{x:.2f}x" for x in paired))
    styles = style_figures(
        spark,
        client,
        endpoint,
        tmp,
        STREAM,
        records,
        lambda c, stream, n: boto3_loop(c, n, stream),
        plain,
    )
    return LocalRuns(boto_before, boto_after, runs, styles, paired)


def cluster_scale(client: Any, endpoint: str, tmp: Path, args: argparse.Namespace) -> Scale:
    """``--cluster``: the scale-out figures (``spark_scale.scale_figures``)."""
    from pyspark import cloudpickle

    register: Any = cloudpickle.register_pickle_by_value
    register(spark_scale)  # the executors cannot import it
    fill_stream(client, CPU_STREAM, args.cpu_records, args.size, SHARDS)
    styles = spark_styles.cluster_styles(tmp, STREAM, args.records)
    return scale_figures(endpoint, tmp, STREAM, CPU_STREAM, args.records, args.cpu_records, styles)


def measure(args: argparse.Namespace) -> tuple[LocalRuns, Scale | None]:
    """One moto server: the local runs, then the cluster's figures (None without --cluster)."""
    with MotoServer() as moto, tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        client = emulator_client(moto.endpoint_url)
        put_seconds = fill_stream(client, STREAM, args.records, args.size, SHARDS)
        print(f"put {args.records} records of {args.size} B in {put_seconds:.1f}s")
        spark = local_spark_session("spark-bench")
        try:
            local = local_runs(spark, moto.endpoint_url, tmp, args.records, client)
        finally:
            spark.stop()
        scale = cluster_scale(client, moto.endpoint_url, tmp, args) if args.cluster else None
    return local, scale


def job_figures(args: argparse.Namespace, local: LocalRuns, scale: Scale | None) -> dict[str, Any]:
    """The figures: the job's records/s per batch size over the boto3 loop's (the mean of
    its two runs), and the cluster's figures with ``--cluster``."""
    boto = (local.boto_before + local.boto_after) / 2
    result: dict[str, Any] = {
        "records": args.records,
        "record_bytes": args.size,
        "shards": SHARDS,
        "master": "local[2]",
        "boto3_rps": round(boto),
        "boto3_rps_before": round(local.boto_before),
        "boto3_rps_after": round(local.boto_after),
    }
    for batch, key in zip(BATCH_SIZES, ("1k", "10k", "50k"), strict=True):
        r = local.batches[batch]
        result[f"job_rps_{key}"] = round(r["rps"])
        result[f"ratio_vs_boto3_{key}"] = round(r["rps"] / boto, 3)
        result[f"spark_ms_per_batch_{key}"] = round(r["spark_ms_per_batch"], 1)
    result["vs_boto3"] = round(statistics.median(local.paired), 3)
    result["vs_boto3_runs"] = [round(x, 3) for x in local.paired]
    result.update(local.styles)
    if scale is not None:
        result.update(scale["executors"])
    return result


def print_summary(result: dict[str, Any], scale: Scale | None) -> None:
    """The job's ratios to the boto3 loop and the cluster's figures, against their goals."""
    print(
        f"job at 10,000: {result['vs_boto3']:.2f}x the boto3 loop (goal >= 1.0; median of "
        f"{', '.join(f'{x:.2f}' for x in result['vs_boto3_runs'])})"
    )
    for key in ("transform", "fanout"):
        print(
            f"{key} on the executors: {result[f'{key}_vs_boto3']:.2f}x the boto3 loop on its "
            "stream (goal >= 1.0)"
        )
    if scale is not None:
        spark_scale.print_scale(scale)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.poison_rate is not None:
        return poison_bench.poison_main(args)
    if args.streams:
        return spark_streams.streams_main(args)
    if args.shards:
        return spark_shards.shards_main(args, lambda c, stream, n: boto3_loop(c, n, stream))
    local, scale = measure(args)
    result = job_figures(args, local, scale)
    print_summary(result, scale)
    return finish_bench(CHART, result, args.plot, args.json)


if __name__ == "__main__":
    sys.exit(main())
