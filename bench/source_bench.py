"""The Structured Streaming source: read once on the executors, against the Spark job.

A moto server, a 4-shard stream of 100,000 records of 200 bytes, one local[2]
SparkSession. In one run:

(a) the source: ``readStream.format("kinesis")`` with ``trigger(availableNow=True)``
    and a foreachBatch sink that counts each batch's rows;
(b) the Spark job with a no-op per-record function, 10,000-record batches, as
    bench/spark_bench.py;
(c) the source once more through the project's fault proxy (no faults), which
    counts the records every GetRecords answer carried;
(d) the idle and latency figures of ``bench/source_latency.py``.

Figures: ``source_vs_job`` = (a) ÷ (b) records/s (each is wall clock from the start
of the query / job to the end of its last batch with records, median of ``--rounds``);
``fetches_per_record`` = records fetched in (c) ÷ records in the stream (goal <= 1.05);
``idle_batch_ms_p50`` (goal <= 500); ``put_to_row_ms_p50``. A small stream is read once
by each first (warm-up).
With ``--json`` the last line is one JSON object; ``--plot FILE`` also draws the
figures as a PNG bar chart (the ``plots`` extra).

    python bench/source_bench.py [--records 100000] [--rounds 1] [--json] [--plot FILE]
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
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
    add_plot_argument,
    check_plot_argument,
    finish_bench,
)
from devkit.spark import bench_job_config, local_spark_session  # noqa: E402
from kinesis_spout.testing.servers import MotoServer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from source_latency import latency_figures  # noqa: E402

from kinesis_spout.testing.streams import emulator_client, fill_stream  # noqa: E402

SHARDS = 4
WARMUP_RECORDS = 2_000


CHART = BarChart(
    "source_bench: the streaming source, {records:,} records of {record_bytes} B in "
    "{shards} shards, moto server",
    (
        Panel(
            "throughput (availableNow)",
            "records/s (higher is better)",
            (
                Bar("streaming source", "source_rps"),
                Bar("Spark job", "job_rps", baseline=True),
            ),
        ),
        Panel(
            "latency (p50)",
            "ms (lower is better)",
            (
                Bar("a batch with no new data", "idle_batch_ms_p50"),
                Bar("put to row", "put_to_row_ms_p50"),
            ),
        ),
    ),
    note="source / job {source_vs_job:.2f}x; "
    "{fetches_per_record:.3f} records fetched per record (goal <= 1.05)",
)
"""The chart ``--plot FILE`` draws."""


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    records: int
    seconds: float
    batches: int

    @property
    def rps(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def run_source(
    spark: Any, endpoint: str, stream: str, expected: int, max_per_shard: int, workdir: Path
) -> Run:
    """(a): the streaming source, availableNow, counting sink."""
    counted: list[int] = []

    def sink(df: Any, batch_id: int) -> None:
        counted.append(df.count())

    started = time.perf_counter()
    ck = workdir / f"ck-{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("kinesis")
        .option("streamName", stream)
        .option("endpointUrl", endpoint)
        .option("maxRecordsPerShard", str(max_per_shard))
        .option("checkpointStore", f"file://{ck}.store")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"the source query failed: {query.exception()}")
    if sum(counted) != expected:
        raise RuntimeError(f"the source read {sum(counted)} records, expected {expected}")
    return Run("source", sum(counted), seconds, len(counted))


def _noop(record: Any) -> None:
    return None


def run_job(spark: Any, endpoint: str, stream: str, expected: int, workdir: Path) -> Run:
    """(b): the Spark job with a no-op per-record function, configured as
    bench/spark_bench.py's 10,000-record batches (file checkpoints)."""
    from kinesis_spout.spark import per_record
    from kinesis_spout.spark import run_job as run_spark_job

    name = f"bench-{uuid.uuid4().hex[:8]}"
    config = bench_job_config(stream, endpoint, workdir, name)
    last_batch_end = [0.0]
    seen = [0]
    batches = [0]

    def progress(report: Any) -> None:
        if report.records:
            last_batch_end[0] = time.perf_counter()
            seen[0] += report.records
            batches[0] += 1

    started = time.perf_counter()
    summary = run_spark_job(config, per_record(_noop), spark=spark, progress=progress)
    if summary.ok != expected or seen[0] != expected:
        raise RuntimeError(
            f"the driver loop acked {summary.ok} of {seen[0]} records, expected {expected}"
        )
    return Run("job", expected, last_batch_end[0] - started, batches[0])


def fetches_per_record(
    spark: Any, endpoint: str, stream: str, records: int, max_per_shard: int, workdir: Path
) -> tuple[float, int]:
    """(c): the source through the fault proxy (no faults): records fetched ÷ records."""
    from devkit.faultproxy import FaultProxy

    with FaultProxy(endpoint) as proxy:
        run_source(spark, proxy.endpoint_url, stream, records, max_per_shard, workdir)
        fetched = proxy.records_returned
    return fetched / records, fetched


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=200, help="bytes per record")
    parser.add_argument("--rounds", type=int, default=1, help="repeat (a) and (b); medians")
    parser.add_argument(
        "--max-records-per-shard",
        type=int,
        default=10_000,
        help="the source's maxRecordsPerShard (default: the option's default)",
    )
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    add_plot_argument(parser)
    args = parser.parse_args(argv)
    check_plot_argument(parser, args.plot)
    return args


def rounds(spark: Any, endpoint: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """(a) and (b), ``--rounds`` times: median records/s of each."""
    runs: dict[str, list[Run]] = {"source": [], "job": []}
    for r in range(args.rounds):
        runs["source"].append(
            run_source(spark, endpoint, "bench", args.records, args.max_records_per_shard, workdir)
        )
        runs["job"].append(run_job(spark, endpoint, "bench", args.records, workdir))
        for name, done in runs.items():
            last = done[-1]
            print(
                f"round {r + 1} {name:14}: {last.rps:10,.0f} records/s "
                f"({last.records:,} in {last.seconds:.1f}s, {last.batches} batches)",
                flush=True,
            )
    return {name: statistics.median(x.rps for x in done) for name, done in runs.items()} | {
        "source_batches": runs["source"][-1].batches
    }


@dataclass(frozen=True, slots=True)
class Measured:
    """What one run measured, before rounding into figures."""

    put_seconds: float
    rps: dict[str, Any]
    """:func:`rounds`: median records/s per reader, and ``source_batches``."""
    fetches: float
    """Records fetched per record in the stream (c)."""
    fetched: int
    latency: dict[str, Any]
    """``bench/source_latency.py``'s figures (d)."""


def warm_up(spark: Any, endpoint: str, args: argparse.Namespace, workdir: Path) -> None:
    """The source and the job read the small ``warmup`` stream once."""
    run_source(spark, endpoint, "warmup", WARMUP_RECORDS, args.max_records_per_shard, workdir)
    run_job(spark, endpoint, "warmup", WARMUP_RECORDS, workdir)
    print("warm-up done", flush=True)


def measure(args: argparse.Namespace) -> Measured:
    """(a) to (d) on one moto server and one local[2] session; each step printed."""
    from kinesis_spout.streaming import register

    with MotoServer() as moto, tempfile.TemporaryDirectory(prefix="source-bench-") as tmp:
        client = emulator_client(moto.endpoint_url)
        put_seconds = fill_stream(client, "bench", args.records, args.size, SHARDS)
        print(f"filled {args.records:,} records of {args.size} B in {put_seconds:.1f}s")
        fill_stream(client, "warmup", WARMUP_RECORDS, args.size, SHARDS)

        spark = local_spark_session("kinesis-spout source bench", "local[2]")
        register(spark)
        workdir = Path(tmp)
        warm_up(spark, moto.endpoint_url, args, workdir)
        rps = rounds(spark, moto.endpoint_url, args, workdir)
        fetches, fetched = fetches_per_record(
            spark, moto.endpoint_url, "bench", args.records, args.max_records_per_shard, workdir
        )
        print(f"fetched {fetched:,} records for {args.records:,}: {fetches:.3f} per record")
        latency = latency_figures(spark, client, moto.endpoint_url, workdir)
        print(
            f"idle batch p50 {latency['idle_batch_ms_p50']} ms ({latency['idle_batches']} "
            f"batches); put to row p50 {latency['put_to_row_ms_p50']} ms"
        )
        spark.stop()
    return Measured(put_seconds, rps, fetches, fetched, latency)


def source_figures(args: argparse.Namespace, m: Measured) -> dict[str, Any]:
    """The figures: (a) and (b)'s medians and their ratios, (c), (d) and the put time."""
    rps = m.rps
    return {
        "records": args.records,
        "record_bytes": args.size,
        "shards": SHARDS,
        "rounds": args.rounds,
        "max_records_per_shard": args.max_records_per_shard,
        "source_rps": round(rps["source"], 1),
        "source_batches": rps["source_batches"],
        "job_rps": round(rps["job"], 1),
        "source_vs_job": round(rps["source"] / rps["job"], 3),
        "fetches_per_record": round(m.fetches, 4),
        "records_fetched": m.fetched,
        **m.latency,
        "put_seconds": round(m.put_seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    # A SIGTERM unwinds the with-blocks of measure(), so the moto server is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    m = measure(args)
    result = source_figures(args, m)
    print(
        f"source {m.rps['source']:,.0f} records/s = {result['source_vs_job']:.2f}x the "
        f"job; fetches per record {m.fetches:.3f} (goal <= 1.05); idle batch "
        f"{m.latency['idle_batch_ms_p50']} ms (goal <= 500)"
    )
    return finish_bench(CHART, result, args.plot, args.json)


if __name__ == "__main__":
    sys.exit(main())
