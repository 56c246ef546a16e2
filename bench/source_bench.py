"""Throughput of the Structured Streaming source against the driver-loop Spark job.

Same data as the Spark job benchmark: a moto server, a 4-shard stream filled
with 100,000 records of 200 bytes, one local[2] SparkSession. In one run:

(a) the source: ``readStream.format("kinesis")`` with ``trigger(availableNow=True)``
    and a foreachBatch sink that counts each batch's rows (the executors read
    every record; the offset process reads each one ahead once too);
(b) the driver loop (``kinesis_spout.spark.run_job``) with a no-op per-record
    function: spout batch -> Spark -> statuses -> ack -> checkpoint, configured
    as bench/spark_bench.py's 10,000-record batches.

Both read the whole stream from TRIM_HORIZON. Records/s is wall clock from
the start of the query / job to the end of its last batch with records. A
small stream is read once by each first, so neither pays the JVM's and the
Python workers' warm-up. ``--rounds N`` repeats (a) and (b) and reports
medians. With ``--json`` the last line is one JSON object.

    python bench/source_bench.py [--records 100000] [--rounds 1] [--json]
"""

from __future__ import annotations

import argparse
import json
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

from kinesis_spout.config import SpoutConfig  # noqa: E402
from kinesis_spout.testing.servers import MotoServer  # noqa: E402
from kinesis_spout.testing.spark import local_spark_session  # noqa: E402
from kinesis_spout.testing.streams import (  # noqa: E402
    create_stream,
    emulator_client,
    make_payloads,
    put_records,
)

SHARDS = 4
WARMUP_RECORDS = 2_000


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
    query = (
        spark.readStream.format("kinesis")
        .option("streamName", stream)
        .option("endpointUrl", endpoint)
        .option("maxRecordsPerShard", str(max_per_shard))
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(workdir / f"ck-{uuid.uuid4().hex[:8]}"))
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


def run_driver(spark: Any, endpoint: str, stream: str, expected: int, workdir: Path) -> Run:
    """(b): the driver-loop job with a no-op per-record function, configured as
    bench/spark_bench.py's 10,000-record batches (file checkpoints)."""
    from kinesis_spout.spark import per_record, run_job

    config = SpoutConfig(
        stream_name=stream,
        endpoint_url=endpoint,
        job_name=f"bench-{uuid.uuid4().hex[:8]}",
        checkpoint_store=f"file://{workdir / 'checkpoints'}",
        dead_letter=str(workdir / "dead-letter"),
        batch_size=10_000,
        batch_max_wait=1.0,
        max_in_flight=10_000,
        empty_shard_backoff=0.2,
        stop_when_idle=0.5,
        checkpoint_interval=5.0,
        message_timeout=0.0,
    )
    last_batch_end = [0.0]
    seen = [0]
    batches = [0]

    def progress(report: Any) -> None:
        if report.records:
            last_batch_end[0] = time.perf_counter()
            seen[0] += report.records
            batches[0] += 1

    started = time.perf_counter()
    summary = run_job(config, per_record(_noop), spark=spark, progress=progress)
    if summary.ok != expected or seen[0] != expected:
        raise RuntimeError(
            f"the driver loop acked {summary.ok} of {seen[0]} records, expected {expected}"
        )
    return Run("driver_loop", expected, last_batch_end[0] - started, batches[0])


def fill(client: Any, stream: str, n: int, size: int) -> float:
    """Create and fill ``stream``; return the seconds the writes took."""
    create_stream(client, stream, SHARDS)
    started = time.perf_counter()
    put_records(client, stream, make_payloads(n, size))
    return time.perf_counter() - started


def main() -> None:
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
    parser.add_argument(
        "--skip-driver", action="store_true", help="measure the source only (ratio null)"
    )
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # A SIGTERM unwinds the with-blocks below, so the moto server is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from kinesis_spout.streaming import register

    with MotoServer() as moto, tempfile.TemporaryDirectory(prefix="source-bench-") as tmp:
        client = emulator_client(moto.endpoint_url)
        put_seconds = fill(client, "bench", args.records, args.size)
        print(f"filled {args.records:,} records of {args.size} B in {put_seconds:.1f}s")
        fill(client, "warmup", WARMUP_RECORDS, args.size)

        spark = local_spark_session("kinesis-spout source bench", "local[2]")
        register(spark)
        workdir = Path(tmp)
        run_source(
            spark, moto.endpoint_url, "warmup", WARMUP_RECORDS, args.max_records_per_shard, workdir
        )
        if not args.skip_driver:
            run_driver(spark, moto.endpoint_url, "warmup", WARMUP_RECORDS, workdir)
        print("warm-up done")

        sources: list[Run] = []
        drivers: list[Run] = []
        for r in range(args.rounds):
            src = run_source(
                spark,
                moto.endpoint_url,
                "bench",
                args.records,
                args.max_records_per_shard,
                workdir,
            )
            sources.append(src)
            print(
                f"round {r + 1} source:      {src.rps:10,.0f} records/s "
                f"({src.records:,} in {src.seconds:.1f}s, {src.batches} batches)"
            )
            if not args.skip_driver:
                drv = run_driver(spark, moto.endpoint_url, "bench", args.records, workdir)
                drivers.append(drv)
                print(
                    f"round {r + 1} driver loop: {drv.rps:10,.0f} records/s "
                    f"({drv.records:,} in {drv.seconds:.1f}s, {drv.batches} batches)"
                )
        spark.stop()

    source_rps = statistics.median(r.rps for r in sources)
    driver_rps = statistics.median(r.rps for r in drivers) if drivers else None
    ratio = source_rps / driver_rps if driver_rps else None
    print(
        f"source {source_rps:,.0f} records/s"
        + (f" | driver loop {driver_rps:,.0f} records/s | ratio {ratio:.2f}" if ratio else "")
    )
    if args.json:
        print(
            json.dumps(
                {
                    "records": args.records,
                    "record_bytes": args.size,
                    "shards": SHARDS,
                    "rounds": args.rounds,
                    "max_records_per_shard": args.max_records_per_shard,
                    "source_rps": round(source_rps, 1),
                    "source_batches": sources[-1].batches,
                    "driver_loop_rps": round(driver_rps, 1) if driver_rps else None,
                    "driver_loop_batches": drivers[-1].batches if drivers else None,
                    "ratio_source_vs_driver": round(ratio, 3) if ratio else None,
                    "put_seconds": round(put_seconds, 1),
                }
            )
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
