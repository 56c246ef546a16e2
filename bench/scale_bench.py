"""What the Spark job's driver and ZooKeeper pay per shard: the figures of ``docs/scale.md``.

Starts a moto server and a standalone ZooKeeper (PySpark's jars), and one ``local[2]``
SparkSession; then for each shard count S of ``--shards`` (128 and 512 by default):
a stream of S shards with ``--records-per-shard`` records each, and the Spark job
(executor reads, per-record no-op, ZooKeeper checkpoints, the library's defaults) run
in this process for ``--seconds``: it reads every record in its first micro-batches,
then the shards are idle. Measured per run:

* driver CPU (this Python process: planning, tracking, checkpoints) and its memory
  (RSS) once the stream is open, against the same figures with no job;
* ZooKeeper writes (the server's transaction id, ``srvr``: checkpoints, the job lease,
  shard leases) per second;
* ListShards calls and pages, GetRecords calls per second (the read tasks' figures),
  Spark jobs, micro-batches, and the read tasks' time per shard they poll.

From two shard counts: the cost of one more shard (driver CPU per shard-second, KiB of
driver memory per shard, ZooKeeper writes per shard-second), and those figures at
1,000 shards. With ``--json`` the last line is one JSON object.

    python bench/scale_bench.py [--shards 128,512] [--seconds 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import kinesis_spout.spout as spout_module  # noqa: E402
from devkit.spark import local_spark_session  # noqa: E402
from kinesis_spout.config import SpoutConfig  # noqa: E402
from kinesis_spout.spark.launch.build import build_driver  # noqa: E402
from kinesis_spout.spark.plan import ReadResult  # noqa: E402
from kinesis_spout.testing.servers import MotoServer  # noqa: E402
from kinesis_spout.testing.streams import (  # noqa: E402
    create_stream,
    emulator_client,
    make_payloads,
    put_records,
)
from kinesis_spout.testing.zookeeper import ZooKeeperServer, four_letter  # noqa: E402

TARGET = 1000
"""The shard count the figures are extrapolated to."""
CALLS: Counter[str] = Counter()
"""Kinesis calls of the driver's clients, by operation."""


def counting_client(*args: Any, **kwargs: Any) -> Any:
    """``make_client`` with every call of the client counted in :data:`CALLS`."""
    client = _make_client(*args, **kwargs)

    def count(model: Any, **_: Any) -> None:
        CALLS[model.name] += 1

    client.meta.events.register("before-call.kinesis", count)
    return client


_make_client = getattr(spout_module, "make_client")  # noqa: B009 - replaced below
setattr(spout_module, "make_client", counting_client)  # noqa: B010 - the spout's clients count


def zxid(zk: ZooKeeperServer) -> int:
    """The server's last transaction id (its low 32 bits count the writes of the epoch)."""
    for line in four_letter(zk.port, "srvr").splitlines():
        if line.startswith("Zxid:"):
            return int(line.split(":")[1].strip(), 16) & 0xFFFFFFFF
    raise RuntimeError("ZooKeeper did not say its zxid")


def rss_kib() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return float(r.ru_utime + r.ru_stime)


def run(
    spark: Any, moto: MotoServer, zk: ZooKeeperServer, shards: int, args: Any
) -> dict[str, Any]:
    """One job run over a fresh stream of ``shards`` shards; its figures."""
    client = emulator_client(moto.endpoint_url)
    stream = f"scale-{shards}-{time.monotonic_ns()}"
    create_stream(client, stream, shards)
    put_records(client, stream, make_payloads(shards * args.records_per_shard, 100))
    cfg = SpoutConfig(
        stream_name=stream,
        job_name=stream,
        endpoint_url=moto.endpoint_url,
        checkpoint_store=zk.url(),
        dead_letter="none",
    )
    driver = build_driver(cfg, lambda r: None, spark=spark, progress=None)
    results: list[ReadResult] = []
    apply = driver.planner.apply

    def spy(got: Any) -> tuple[int, int]:
        got = list(got)
        results.extend(got)
        return apply(got)

    driver.planner.apply = spy  # type: ignore[method-assign,assignment]
    CALLS.clear()
    rss0, cpu0, z0 = rss_kib(), cpu_seconds(), zxid(zk)
    threading.Timer(args.seconds, lambda: driver.request_stop("scale bench: time")).start()
    t0 = time.perf_counter()
    summary = driver.run()
    seconds = time.perf_counter() - t0
    cpu, writes, rss = cpu_seconds() - cpu0, zxid(zk) - z0, rss_kib()
    polled = [r for r in results if r.end is not None]
    return {
        "shards": shards,
        "seconds": round(seconds, 1),
        "records": summary.ok,
        "driver_cpu_s": round(cpu, 2),
        "driver_rss_mib": round(rss / 1024, 1),
        "driver_rss_growth_mib": round((rss - rss0) / 1024, 1),
        "zk_writes": writes,
        "zk_writes_per_s": round(writes / seconds, 1),
        "list_shards_calls": CALLS["ListShards"],
        "get_records_calls": sum(r.end.calls for r in results if r.end is not None),
        "get_records_per_s": round(
            sum(r.end.calls for r in results if r.end is not None) / seconds, 1
        ),
        "micro_batches": driver.micro_batches,
        "spark_jobs": driver.spark_jobs,
        "task_ms_per_shard": round(
            1000 * sum(r.seconds for r in polled) / max(len(polled), 1) / max(1, shards // 2), 2
        ),
    }


def figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The cost of one more shard, from the smallest and the largest run, and at 1,000."""
    small, large = runs[0], runs[-1]
    extra = int(large["shards"] - small["shards"])
    secs = (small["seconds"] + large["seconds"]) / 2

    def per_shard(key: str) -> float:
        return float(large[key] - small[key]) / extra

    cpu = 1000 * per_shard("driver_cpu_s") / secs
    mem = 1024 * (large["driver_rss_mib"] - small["driver_rss_mib"]) / extra
    zk = per_shard("zk_writes") / secs
    return {
        "runs": runs,
        "driver_cpu_ms_per_shard_s": round(cpu, 3),
        "driver_kib_per_shard": round(mem, 1),
        "zk_writes_per_shard_s": round(zk, 3),
        f"at_{TARGET}": {
            "driver_cores": round(cpu * TARGET / 1000, 2),
            "driver_mib_more": round(mem * TARGET / 1024, 1),
            "zk_writes_per_s": round(zk * TARGET, 1),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", default="128,512", help="shard counts, smallest first")
    parser.add_argument("--seconds", type=float, default=30.0, help="each run's length")
    parser.add_argument("--records-per-shard", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="one JSON object on the last line")
    args = parser.parse_args(argv)
    counts = sorted(int(s) for s in args.shards.split(","))
    logging.basicConfig(level=logging.WARNING)
    runs = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        MotoServer() as moto,
        ZooKeeperServer(workdir=Path(tmp) / "zk") as zk,
    ):
        spark = local_spark_session("scale-bench")
        try:
            for shards in counts:
                r = run(spark, moto, zk, shards, args)
                runs.append(r)
                print(
                    f"{shards:>5} shards: {r['records']:,} records, driver CPU "
                    f"{r['driver_cpu_s']} s in {r['seconds']} s, RSS {r['driver_rss_mib']} MiB, "
                    "ZooKeeper writes "
                    f"{r['zk_writes_per_s']}/s, ListShards {r['list_shards_calls']}, GetRecords "
                    f"{r['get_records_per_s']}/s, {r['micro_batches']} micro-batches "
                    f"({r['spark_jobs']} Spark jobs), read tasks {r['task_ms_per_shard']} ms "
                    "per shard polled",
                    flush=True,
                )
        finally:
            spark.stop()
    result = figures(runs)
    at = result[f"at_{TARGET}"]
    print(
        f"per shard: driver CPU {result['driver_cpu_ms_per_shard_s']} ms/s, "
        f"{result['driver_kib_per_shard']} KiB, ZooKeeper {result['zk_writes_per_shard_s']} "
        f"writes/s; at {TARGET} shards: {at['driver_cores']} driver cores, "
        f"+{at['driver_mib_more']} MiB, {at['zk_writes_per_s']} ZooKeeper writes/s"
    )
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
