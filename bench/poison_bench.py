"""Throughput with poison records, for ``bench/spark_bench.py --poison-rate R``.

Two 4-shard streams of the same size on one moto server: a clean one, and one
where a fraction ``R`` of the records (chosen with a fixed seed) are *poison*:
the per-record function raises on them every time, so each is retried
``retry_limit`` times and then dead-lettered. For each read mode (``driver``,
``executors``) and each config (``default``: the README's defaults, batch
10,000 and max_in_flight 10,000; ``small``: batch 2,000 and max_in_flight 500;
both with retry_limit 3) the job reads the clean stream and then the poisoned
one in the same process:

* ``poison_vs_clean``: records done per second (acked + dead-lettered, from the
  start of the run to the last record done) with poison ÷ without, each the
  median of 3 runs (clean and poisoned alternated);
* the same two figures of the ``small`` config with ``fast_retries = false``
  (retries at later micro-batches, as before), for comparison;
* ``dead_letter_latency_batches_max``: for each poison record, the micro-batches
  from the one where it first failed to the one where it was dead-lettered,
  both counted (1 = dead-lettered in the batch of its first failure); the max.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
from bisect import bisect_left
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from devkit.plots import Bar, BarChart, Panel, Series, finish_bench
from devkit.spark import local_spark_session
from kinesis_spout.config import SpoutConfig
from kinesis_spout.deadletter import read_dead_letters
from kinesis_spout.spark.launch.build import run_job
from kinesis_spout.spark.process.styles import InputRecord, per_record
from kinesis_spout.spark.reports import BatchReport
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import (
    create_stream,
    emulator_client,
    make_payloads,
    put_records,
)

POISON = b"poison|"
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "small": {"batch_size": 2_000, "max_in_flight": 500},
}
READ_MODES = ("executors",)
OFF = {"fast_retries": False}
"""The comparison run: retries wait for later micro-batches (as before fast retries)."""


def poison_function(log_path: str, record: InputRecord) -> None:
    """Raises on poison records (logging each one's first failure); else nothing."""
    if record.data.startswith(POISON):
        if record.attempt == 1:
            with open(log_path, "a", encoding="utf-8") as fh:
                fh.write(f"{record.message_id} {time.time():.6f}\n")
        raise ValueError(f"poison record {record.message_id}")


def poisoned_payloads(n: int, size: int, rate: float, seed: int = 1) -> list[tuple[str, bytes]]:
    """``make_payloads`` with ``round(n * rate)`` of them (seeded choice) made poison."""
    payloads = make_payloads(n, size)
    for i in random.Random(seed).sample(range(n), round(n * rate)):
        key, body = payloads[i]
        payloads[i] = (key, POISON + body[len(POISON) :])
    return payloads


def make_streams(client: Any, n: int, size: int, rate: float) -> tuple[str, str, int]:
    """(clean stream, poisoned stream, poison count), created and filled."""
    clean, poisoned = "bench-clean", "bench-poison"
    create_stream(client, clean, 4)
    create_stream(client, poisoned, 4)
    put_records(client, clean, make_payloads(n, size))
    payloads = poisoned_payloads(n, size, rate)
    put_records(client, poisoned, payloads)
    return clean, poisoned, sum(1 for _, b in payloads if b.startswith(POISON))


def one_run(
    spark: Any, endpoint: str, tmp: Path, stream: str, total: int, mode: str, extra: dict[str, Any]
) -> dict[str, Any]:
    """The job over a whole stream; records done per second and the latency figure."""
    name = f"poison-{mode}-{time.monotonic_ns()}"
    log_path = tmp / f"{name}.failures"
    log_path.touch()
    cfg = SpoutConfig(
        stream_name=stream,
        job_name=name,
        endpoint_url=endpoint,
        checkpoint_store=f"file://{tmp / 'checkpoints'}",
        dead_letter=str(tmp / "dead-letter"),
        stop_when_idle=1.0,
        empty_shard_backoff=0.2,
        retry_limit=3,
        **extra,
    )
    reports: list[tuple[float, float, BatchReport]] = []
    start = time.perf_counter()
    summary = run_job(
        cfg,
        per_record(partial(poison_function, str(log_path))),
        spark=spark,
        progress=lambda r: reports.append((time.perf_counter(), time.time(), r)),
    )
    done = summary.ok + summary.dead_lettered
    if done != total:
        raise RuntimeError(f"{stream} {mode}: {done} of {total} records done ({summary.line()})")
    elapsed = reports[-1][0] - start
    dead = [e for e in read_dead_letters(tmp / "dead-letter") if e["job"] == name]
    return {
        "rps": total / elapsed,
        "seconds": elapsed,
        "batches": len(reports),
        "dead_lettered": len(dead),
        "latency_batches_max": latency_batches(log_path, dead, [w for _, w, _ in reports]),
    }


def latency_batches(log_path: Path, dead: list[dict[str, Any]], ends: list[float]) -> int:
    """Max over dead letters of (batch of its dead letter - batch of its first failure + 1);
    a batch is found by the wall time its progress line came (``ends``)."""
    failed_at: dict[str, float] = {}
    for line in log_path.read_text(encoding="utf-8").splitlines():
        mid, t = line.split()
        failed_at.setdefault(mid, float(t))
    worst = 0
    for e in dead:
        first = failed_at.get(e["message_id"])
        if first is None:
            continue
        dl = datetime.fromisoformat(e["dead_lettered_at"]).timestamp()
        worst = max(worst, bisect_left(ends, dl) - bisect_left(ends, first) + 1)
    return worst


def paired_runs(
    spark: Any,
    endpoint: str,
    tmp: Path,
    streams: tuple[str, str],
    n: int,
    mode: str,
    extra: dict[str, Any],
    repeats: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Clean and poisoned runs, alternated ``repeats`` times: the median-rps run of
    each (the poisoned one with the worst latency of all its runs)."""
    clean_runs, bad_runs = [], []
    for _ in range(repeats):
        clean_runs.append(one_run(spark, endpoint, tmp, streams[0], n, mode, extra))
        bad_runs.append(one_run(spark, endpoint, tmp, streams[1], n, mode, extra))
    base = sorted(clean_runs, key=lambda r: r["rps"])[len(clean_runs) // 2]
    bad = dict(sorted(bad_runs, key=lambda r: r["rps"])[len(bad_runs) // 2])
    bad["latency_batches_max"] = max(r["latency_batches_max"] for r in bad_runs)
    bad["dead_lettered"] = min(r["dead_lettered"] for r in bad_runs)
    return base, bad


def poison_figures(
    spark: Any,
    client: Any,
    endpoint: str,
    tmp: Path,
    n: int,
    size: int,
    rate: float,
    repeats: int = 3,
) -> dict[str, Any]:
    """Every figure of the module docstring, per read mode and config."""
    clean, poisoned, n_poison = make_streams(client, n, size, rate)
    for mode in READ_MODES:  # warm-up: Python workers, code paths
        one_run(spark, endpoint, tmp, clean, n, mode, CONFIGS["small"])
    out: dict[str, Any] = {
        "poison_records": n_poison,
        "records": n,
        "poison_rate": rate,
        "repeats": repeats,
    }
    worst_ratio, worst_latency = float("inf"), 0
    for mode in READ_MODES:
        for cname, extra in CONFIGS.items():
            base, bad = paired_runs(
                spark, endpoint, tmp, (clean, poisoned), n, mode, extra, repeats
            )
            if bad["dead_lettered"] != n_poison:
                raise RuntimeError(f"{mode}/{cname}: {bad['dead_lettered']} of {n_poison} poison")
            ratio = bad["rps"] / base["rps"]
            out[f"{mode}_{cname}"] = {
                "clean_rps": round(base["rps"]),
                "poison_rps": round(bad["rps"]),
                "poison_vs_clean": round(ratio, 3),
                "dead_letter_latency_batches_max": bad["latency_batches_max"],
                "batches": bad["batches"],
            }
            print(
                f"{mode:9} {cname:7}: clean {base['rps']:>7,.0f} rec/s, {rate:.0%} poison "
                f"{bad['rps']:>7,.0f} rec/s -> {ratio:.2f}x (goal >= 0.8); dead letter within "
                f"{bad['latency_batches_max']} batches (goal <= 2)",
                flush=True,
            )
            worst_ratio = min(worst_ratio, ratio)
            worst_latency = max(worst_latency, bad["latency_batches_max"])
        slow = one_run(spark, endpoint, tmp, poisoned, n, mode, {**CONFIGS["small"], **OFF})
        small = out[f"{mode}_small"]
        small["poison_vs_clean_without_fast_retries"] = round(slow["rps"] / small["clean_rps"], 3)
        small["dead_letter_latency_batches_max_without_fast_retries"] = slow["latency_batches_max"]
        print(
            f"{mode:9} small, fast_retries off: {rate:.0%} poison {slow['rps']:>7,.0f} rec/s -> "
            f"{slow['rps'] / small['clean_rps']:.2f}x; dead letter within "
            f"{slow['latency_batches_max']} batches",
            flush=True,
        )
    out["poison_vs_clean"] = round(worst_ratio, 3)
    out["dead_letter_latency_batches_max"] = worst_latency
    return out


POISON_CHART = BarChart(
    "spark_bench --poison-rate {poison_rate:g}: {records:,} records, {poison_records:,} poison",
    (
        Panel(
            "throughput, clean stream vs with poison records",
            "records done/s (higher is better)",
            tuple(
                Bar(f"{mode} reads, {name}", f"{mode}_{name}")
                for mode in READ_MODES
                for name in ("default", "small")
            ),
            (
                Series("clean", "{}.clean_rps", baseline=True),
                Series("with poison", "{}.poison_rps"),
            ),
        ),
    ),
    note="worst poison_vs_clean {poison_vs_clean:.2f} (goal >= 0.8); dead letter within "
    "{dead_letter_latency_batches_max} batch(es); default = batch 10,000, small = batch 2,000",
)
"""The chart of ``--poison-rate R --plot FILE``."""


def poison_main(args: argparse.Namespace) -> int:
    """``--poison-rate``: the figures of bench/poison_bench.py."""
    from pyspark import cloudpickle

    if not 0 < args.poison_rate < 1:
        raise SystemExit(f"--poison-rate must be between 0 and 1, not {args.poison_rate}")
    register: Any = cloudpickle.register_pickle_by_value
    register(sys.modules[__name__])  # the executors cannot import it
    logging.getLogger("kinesis_spout.deadletter").setLevel(logging.ERROR)  # one line per record
    with MotoServer() as moto, tempfile.TemporaryDirectory() as tmpdir:
        client = emulator_client(moto.endpoint_url)
        spark = local_spark_session("spark-bench-poison")
        try:
            result = poison_figures(
                spark,
                client,
                moto.endpoint_url,
                Path(tmpdir),
                args.records,
                args.size,
                args.poison_rate,
            )
        finally:
            spark.stop()
    print(
        f"worst poison_vs_clean {result['poison_vs_clean']:.2f} (goal >= 0.8), worst dead-letter "
        f"latency {result['dead_letter_latency_batches_max']} batches (goal <= 2)"
    )
    return finish_bench(POISON_CHART, result, args.plot, args.json)
