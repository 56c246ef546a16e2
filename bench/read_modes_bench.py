"""Executor reads against driver reads where driver reads might still win: one core, tiny
streams, and the time a lone record takes.

Starts a moto server; for each master of ``--masters`` (``local[1]``, ``local[2]``) one
SparkSession, warmed up with a run of each mode; then per stream of ``STREAMS``
(records, shards) the job (per-record no-op, file checkpoints, the library's defaults
otherwise: batch 10,000) reads the whole stream once per read mode, from the start of
the run to the ack of its last record: records/s, and ``executors_vs_driver`` (executor
reads' records/s over driver reads'). ``latency``: the job idle on an empty 1-shard
stream for 2-8 s (seeded, so the put is not in step with the polls), one record put, the
time until its micro-batch is applied (median of 5), per mode. With ``--json`` the last
line is one JSON object.

    python bench/read_modes_bench.py [--masters local[1],local[2]] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from devkit.spark import local_spark_session  # noqa: E402
from kinesis_spout.config import SpoutConfig  # noqa: E402
from kinesis_spout.spark.launch.build import build_driver  # noqa: E402
from kinesis_spout.spark.processing import InputRecord  # noqa: E402
from kinesis_spout.testing.servers import MotoServer  # noqa: E402
from kinesis_spout.testing.streams import (  # noqa: E402
    create_stream,
    emulator_client,
    make_payloads,
    put_records,
)

STREAMS = ((100, 1), (2_000, 4), (40_000, 4))
"""(records, shards) of the throughput runs: tiny, small, the benches' usual."""
MODES = ("driver", "executors")
LATENCY_RUNS = 5
"""Lone records per mode, each put 2-8 s (seeded) after the job found the shard empty."""


def noop(record: InputRecord) -> None:
    return None


def config(endpoint: str, tmp: Path, stream: str, mode: str, **kw: Any) -> SpoutConfig:
    name = f"{stream}-{mode}-{time.monotonic_ns()}"
    values: dict[str, Any] = dict(
        stream_name=stream,
        job_name=name,
        endpoint_url=endpoint,
        checkpoint_store=f"file://{tmp / 'checkpoints'}",
        dead_letter="none",
        read_on=mode,
        stop_when_idle=0.5,
    )
    return SpoutConfig(**(values | kw))


def throughput(spark: Any, endpoint: str, tmp: Path, stream: str, mode: str, n: int) -> float:
    """Records/s of one run over the whole stream (start to the last record's ack)."""
    acked: list[float] = []
    driver = build_driver(
        config(endpoint, tmp, stream, mode),
        noop,
        spark=spark,
        progress=lambda r: acked.append(time.perf_counter()),
    )
    start = time.perf_counter()
    summary = driver.run()
    if summary.ok != n:
        raise RuntimeError(f"{stream}, {mode} reads: acked {summary.ok} of {n}")
    return n / (acked[-1] - start)


def latency(spark: Any, client: Any, endpoint: str, tmp: Path, mode: str, idle: float) -> float:
    """Seconds from putting one record into a 1-shard stream the job has found empty for
    ``idle`` seconds to the record's micro-batch applied."""
    stream = f"lone-{mode}-{time.monotonic_ns()}"
    create_stream(client, stream, 1)
    applied: list[float] = []
    cfg = config(endpoint, tmp, stream, mode, stop_when_idle=0.0)
    driver = build_driver(
        cfg, noop, spark=spark, progress=lambda r: applied.append(time.perf_counter())
    )
    thread = threading.Thread(target=driver.run)
    thread.start()
    time.sleep(idle)
    put = time.perf_counter()
    put_records(client, stream, make_payloads(1, 100))
    deadline = time.monotonic() + 60
    while not applied and time.monotonic() < deadline:
        time.sleep(0.01)
    driver.request_stop("bench: done")
    thread.join(60)
    if not applied:
        raise RuntimeError(f"{mode} reads: the lone record was not applied within 60 s")
    return applied[0] - put


def measure(master: str, moto: MotoServer, tmp: Path) -> dict[str, Any]:
    client = emulator_client(moto.endpoint_url)
    spark = local_spark_session(f"read-modes-{master}", master=master)
    out: dict[str, Any] = {}
    try:
        warm = f"warm-{time.monotonic_ns()}"
        create_stream(client, warm, 1)
        put_records(client, warm, make_payloads(50, 100))
        for mode in MODES:
            throughput(spark, moto.endpoint_url, tmp, warm, mode, 50)
        for n, shards in STREAMS:
            stream = f"s{n}-{shards}-{time.monotonic_ns()}"
            create_stream(client, stream, shards)
            put_records(client, stream, make_payloads(n, 200))
            rps = {m: throughput(spark, moto.endpoint_url, tmp, stream, m, n) for m in MODES}
            key = f"{n}x{shards}"
            out[key] = {m: round(v) for m, v in rps.items()}
            out[key]["executors_vs_driver"] = round(rps["executors"] / rps["driver"], 2)
            print(
                f"{master}, {n:>6,} records in {shards} shards: driver {rps['driver']:>7,.0f}, "
                f"executors {rps['executors']:>7,.0f} records/s "
                f"({out[key]['executors_vs_driver']:.2f}x)",
                flush=True,
            )
        rng = random.Random(7)  # puts at seeded random moments: not in step with the polls
        idles = [rng.uniform(2.0, 8.0) for _ in range(LATENCY_RUNS)]
        lat = {
            m: statistics.median(
                latency(spark, client, moto.endpoint_url, tmp, m, idle) for idle in idles
            )
            for m in MODES
        }
        out["latency_s"] = {m: round(v, 2) for m, v in lat.items()}
        print(
            f"{master}, one record into an idle shard: driver {lat['driver']:.2f} s, "
            f"executors {lat['executors']:.2f} s (medians of {LATENCY_RUNS})",
            flush=True,
        )
    finally:
        spark.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--masters", default="local[1],local[2]")
    parser.add_argument("--json", action="store_true", help="one JSON object on the last line")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmpdir, MotoServer() as moto:
        for master in args.masters.split(","):
            result[master] = measure(master, moto, Path(tmpdir))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
