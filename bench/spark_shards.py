"""``spark_bench.py --shards 4,32,128``: how the Spark job's cost grows with shards (issue 22).

One moto server; every figure comes from the job run as a user runs it
(:mod:`job_runs`: ``kinesis-spout run --config job.toml``, executor reads, ``local[2]``,
a per-record no-op, file checkpoints in a temp dir, ``stop_when_idle`` 0.5 s for the data
runs, the library's defaults otherwise: batch 10,000, ``empty_shard_backoff`` 1 s):

* ``rps_<S>``: per shard count S, a fresh stream of S shards holding the same
  ``--records`` records of ``--size`` bytes (a partition key each: spread evenly over the
  shards), read from TRIM_HORIZON until idle, ``--rounds`` times (5), the shard counts
  alternated; the run of median records/s gives every data-run figure of S (each run's
  records/s in ``rps_runs_<S>``): records/s from the job's summary line (records
  done per second of processing; the first micro-batch, which starts the Python workers,
  included). ``shards_<max>_vs_<min>``: ``rps`` at the largest S over the smallest. From the
  progress lines as they arrived: ``rps_wall_<S>`` from the job's banner (printed once its
  Spark session is up; the stream is opened while the session starts) to its last progress
  line, ``rps_warm_<S>`` from its first progress line to its last (the
  ratios ``shards_<max>_vs_<min>_wall`` and ``_warm``). The moto server's own CPU
  beside that run (``/proc``, sampled every 50 ms): ``emulator_cpu_s_<S>`` launch to
  exit, ``emulator_busy_<S>`` over the micro-batches with records only (each from its
  progress line's arrival back by its records over its records/s), per second of them:
  moto serves every call in one Python process, so near 1.0 it, not the job, set the pace;
  ``machine_busy_<S>`` the same of the whole machine (``/proc/stat``: near 2.0 on two
  cores, the run was CPU-bound, moto's share included).
* ``boto3_rps_<S>``: a plain boto3 GetRecords loop in one thread (a stock client, an
  iterator per shard, then round-robin pages until every shard is empty) over the same
  stream, run just before each data run; the median of the rounds (each in
  ``boto3_rps_runs_<S>``). ``boto3_shards_<max>_vs_<min>``: what the emulator allows a
  bare reader as the shards grow, its per-request cost paid on the same cores as the job.
* ``read_floor_rps_<S>``: the stream read whole by the read tasks' own code in two
  processes, no Spark, no processing (:mod:`read_floor`), just before each data run; the
  median of the rounds (each in ``read_floor_rps_runs_<S>``). ``read_floor_<max>_vs_<min>``:
  the shard scaling the emulator leaves a job that reads as this one does;
  ``shards_<max>_vs_<min>_of_floor``: the job's ratio over it (1.0: the job's own cost
  grows with the shards no faster than its reads through the emulator do).
* ``spark_jobs_per_batch``: those runs write Spark's event log; its SparkListenerJobStart
  events (but the start-up's warm-up job, one per run) over the micro-batches the job ran
  at the largest S, as its summary line counts them: those with a progress line and those
  that read nothing (the polls of shards at their tip, which find the stream idle)
  (``spark_jobs_<S>``, ``batches_<S>``, ``batches_with_records_<S>`` for each S;
  ``spark_jobs_per_batch_with_records``: the jobs over the progress lines only).
* idle: the job on an empty stream of the smallest and the largest S, SIGTERM
  ``--idle-seconds`` (20) after its banner (its Spark session is up), then waited for;
  ``--idle-pairs`` (5) pairs of runs, the two counts alternated. Per pair,
  (CPU at large S - CPU at small S) / (large S - small S) / idle seconds, the CPU being
  that of the run's whole process tree (launcher, JVM, Python driver, Python workers:
  :mod:`proctree`), launch to exit: ``idle_cpu_ms_per_shard_s`` is the median of the
  pairs' figures (each pair's in ``idle_cpu_ms_per_shard_s_runs``). One pair does not
  settle it: the JVM's start and its idle housekeeping move the tree's CPU by a second or
  more from one run to the next, which over 124 shards and 20 s is 0.4 ms per
  shard-second, about half the goal (one pair per bench gave -0.23 to 2.2 on the same
  code). The median pair's
  runs give ``idle_cpu_s_<S>``/``idle_wall_s_<S>`` (CPU and wall time, launch to exit),
  ``idle_window_*`` (the same from the tree's CPU sampled at the banner and at the SIGTERM
  only: start-up and shut-down left out; ``idle_window_cpu_ms_per_shard_s`` is the median
  of the pairs' too, with its ``_runs``), ``idle_cores_<S>`` (that CPU per second: 2.0 =
  both cores busy, the figure then capped by the machine), ``idle_start_s_<S>`` (launch
  to the banner) and ``idle_stop_s_<S>`` (SIGTERM to exit).
* ``startup_overhead_s``: the median of 5 of (launch -> the first record reaching the
  function (it writes a timestamp file on its first call; then SIGTERM)) minus (a bare
  Python run of ``SparkSession`` ``local[2]`` + ``parallelize([1]).count()``, launch ->
  count done), each job run paired with the bare run just before it: a pair shares the
  machine's hour, and the bare run moves by more than a second between pairs (11.4 /
  13.6 / 12.1 s in one bench), so the difference of the two medians (printed too,
  ``startup_overhead_of_medians_s``) can set one pair's job against another's bare run.
  Each pair's difference is in ``startup_overhead_s_runs``. The job reads a stream of the smallest S
  shards with ``STARTUP_RECORDS_PER_SHARD`` records each: the figure is the job's start,
  not how long the emulator takes to serve a full first page (moto answers a GetRecords
  of 10,000 records of 200 B in 0.9 s on an idle machine, 1.2-2.4 s with four of them at
  once beside a starting Spark: more than the whole goal).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import job_runs
import spark_idle
import spark_styles
from job_runs import JobRun
from proctree import CpuTrace, machine_cpu, process_cpu
from read_floor import read_floor
from reader_bench import stock_client

from devkit.plots import Bar, BarChart, Panel, Series, finish_bench
from devkit.spark import local_spark_session
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import (
    create_stream,
    emulator_client,
    make_payloads,
    put_records,
)

STARTUP_RUNS = 5
STARTUP_RECORDS_PER_SHARD = 100


def shard_counts(text: str) -> list[int]:
    """``4,32,128`` -> [4, 32, 128] (sorted, each >= 1, at least two)."""
    try:
        counts = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected shard counts like 4,32,128") from None
    if len(counts) < 2 or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected two or more counts, each >= 1")
    return counts


def at_least_one(text: str) -> int:
    """A count flag's value: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 1 or more")
    return value


def add_shards_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shards",
        type=shard_counts,
        metavar="S1,S2,...",
        help="instead: the shard-scaling figures at these shard counts (bench/spark_shards.py; "
        "--records defaults to 40,000 there)",
    )
    parser.add_argument(
        "--idle-seconds", type=float, default=20.0, help="with --shards: each idle run's length"
    )
    parser.add_argument(
        "--idle-pairs",
        type=at_least_one,
        default=5,
        help="with --shards: idle runs at the smallest and the largest count, alternated; "
        "the median pair gives the idle figures (default 5)",
    )
    parser.add_argument(
        "--rounds",
        type=at_least_one,
        default=5,
        help="with --shards: data runs per shard count, alternated over the counts; the "
        "median run of each count gives its figures (default 5)",
    )


def chart(shards: list[int]) -> BarChart:
    """The chart of ``--shards ... --plot FILE``."""
    bars = tuple(Bar(f"{s} shards", str(s)) for s in shards)
    ends = tuple(Bar(f"{s} shards", str(s)) for s in (shards[0], shards[-1]))
    return BarChart(
        "spark_bench --shards: {records:,} records of {record_bytes} B, executor reads, "
        "local[2], moto server",
        (
            Panel(
                "throughput",
                "records/s (higher is better)",
                bars,
                (
                    Series("summary line", "rps_{}"),
                    Series("session up to last batch", "rps_wall_{}"),
                    Series("after batch 0", "rps_warm_{}"),
                    Series("plain boto3 loop", "boto3_rps_{}"),
                ),
            ),
            Panel(
                "idle job, whole process tree",
                "CPU cores busy (lower is better)",
                ends,
                (Series("", "idle_cores_{}"),),
            ),
        ),
        note=f"shards_{shards[-1]}_vs_{shards[0]} {{shards_{shards[-1]}_vs_{shards[0]}:.2f}} "
        f"(boto3 loop {{boto3_shards_{shards[-1]}_vs_{shards[0]}:.2f}}); "
        "idle {idle_cpu_ms_per_shard_s:.1f} ms CPU per shard-second; "
        "start-up overhead {startup_overhead_s:.1f} s",
    )


def fill(client: Any, stream: str, shards: int, records: int, size: int) -> tuple[int, int]:
    """A fresh stream of ``shards`` shards with ``records`` records; the fewest and most
    records a shard got."""
    create_stream(client, stream, shards)
    # A partition key per record: the records spread evenly over the shards.
    items = [(f"pk-{i}", data) for i, (_, data) in enumerate(make_payloads(records, size))]
    put = put_records(client, stream, items)
    per_shard = Counter(shard for shard, _ in put)
    return min(per_shard.values()) if len(per_shard) == shards else 0, max(per_shard.values())


def data_run(emulator: MotoServer, tmp: Path, shards: int, records: int) -> dict[str, Any]:
    """The job over the stream of ``shards`` shards, with Spark's event log and the
    emulator's CPU traced beside it: its figures."""
    workdir = job_runs.job_dir(tmp, f"data-{shards}")
    toml = job_runs.write_job(workdir, f"data-{shards}", emulator.endpoint_url, stop_when_idle=0.5)
    events = workdir / "events"
    assert emulator.proc is not None
    with (
        CpuTrace(process_cpu(emulator.proc.pid)) as trace,
        CpuTrace(machine_cpu) as machine,
    ):
        run = job_runs.run_job(toml, spark_conf=job_runs.event_log_conf(events))
    done = int(run.summary()["done"])
    if done != records:
        raise RuntimeError(f"{shards} shards: the job did {done} of {records} records")
    warm, wall = run.warm_records_per_second(), run.wall_records_per_second()
    return {
        "rps": run.records_per_second,
        "rps_wall": round(wall) if wall is not None else None,
        "rps_warm": round(warm) if warm is not None else None,
        "batches": run.micro_batches(),
        "batches_with_records": len(run.batches()),
        "spark_jobs": job_runs.count_job_starts(events),
        "cpu_s": round(run.cpu_seconds, 2),
        "wall_s": round(run.wall_seconds, 1),
        "emulator_cpu_s": round(trace.between(run.launched, run.ended), 2),
        "emulator_busy": cores_busy(trace, run.batch_windows()),
        "machine_busy": cores_busy(machine, run.batch_windows()),
    }


def cores_busy(trace: CpuTrace, windows: list[tuple[float, float]]) -> float | None:
    """CPU seconds per second of the job's micro-batches with records: the emulator's
    (near 1.0, its one Python process, one core under its GIL, was the bound) or the
    machine's (near its cores, 2.0 here, the run was CPU-bound)."""
    seconds = sum(end - start for start, end in windows)
    if seconds <= 0:
        return None
    return round(sum(trace.between(start, end) for start, end in windows) / seconds, 2)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median records/s (the lower middle of an even count), with every
    run's records/s as ``rps_runs``."""
    ranked = sorted(runs, key=lambda r: r["rps"])
    return ranked[(len(ranked) - 1) // 2] | {"rps_runs": [round(r["rps"]) for r in runs]}


def startup_runs(endpoint: str, tmp: Path, stream: str) -> tuple[list[float], list[float]]:
    """Launch -> first record of the job, and of the bare PySpark run, each ``STARTUP_RUNS``
    times, interleaved (bare first)."""
    job, bare = [], []
    for i in range(STARTUP_RUNS):
        bare.append(job_runs.bare_pyspark_seconds())
        workdir = job_runs.job_dir(tmp, f"startup-{i}")
        toml = job_runs.write_job(workdir, stream, endpoint, stop_when_idle=0.5)
        run = job_runs.run_job(toml, stop_at_first_record=True)
        if run.first_record is None:
            raise RuntimeError("startup run: no record reached the function")
        job.append(run.first_record - run.launched)
        print(
            f"start-up {i + 1}: bare PySpark {bare[-1]:.1f} s, job to first record {job[-1]:.1f} s"
        )
    return job, bare


@dataclass(frozen=True, slots=True)
class Measured:
    """What the runs measured, before rounding into figures."""

    data: dict[int, dict[str, Any]]
    """Per shard count: :func:`data_run`'s figures."""
    boto3: dict[int, list[float]]
    """Per shard count: the boto3 loop's records/s, a run per round."""
    floor: dict[int, list[float]]
    """Per shard count: :func:`read_floor.read_floor`'s records/s, a run per round."""
    idle: list[dict[int, JobRun]]
    """The idle runs, in pairs: each a run at the smallest and one at the largest shard
    count, one after the other."""
    startup_job: list[float]
    startup_bare: list[float]
    styles: dict[str, Any]
    """``spark_styles.style_figures``: the transform and the fan-out over boto3."""


BotoLoop = Callable[[Any, str, int], float]
"""``(client, stream, records) -> records/s`` of a plain boto3 GetRecords loop."""


def measure(args: argparse.Namespace, boto3_loop: BotoLoop) -> Measured:
    """Fill the streams, then the data runs, the idle runs, the start-up runs and the
    DataFrame styles, each printed as it ends."""
    ends = (args.shards[0], args.shards[-1])
    with MotoServer() as moto, tempfile.TemporaryDirectory(prefix="spark-shards-") as tmpdir:
        tmp, endpoint = Path(tmpdir), moto.endpoint_url
        client = emulator_client(endpoint)
        for s in args.shards:
            t = time.perf_counter()
            lo, hi = fill(client, f"data-{s}", s, args.records, args.size)
            print(
                f"{s} shards: put {args.records:,} records of {args.size} B in "
                f"{time.perf_counter() - t:.1f} s ({lo}..{hi} per shard)"
            )
        for s in ends:
            create_stream(client, f"empty-{s}", s)
        fill(client, "startup", ends[0], ends[0] * STARTUP_RECORDS_PER_SHARD, args.size)
        runs: dict[int, list[dict[str, Any]]] = {s: [] for s in args.shards}
        boto3: dict[int, list[float]] = {s: [] for s in args.shards}
        floor: dict[int, list[float]] = {s: [] for s in args.shards}
        plain = stock_client(endpoint)
        for _, s in itertools.product(range(args.rounds), args.shards):
            boto3[s].append(boto3_loop(plain, f"data-{s}", args.records))
            floor[s].append(read_floor(client, endpoint, f"data-{s}", args.records))
            runs[s].append(r := data_run(moto, tmp, s, args.records))
            print(
                f"{s:>4} shards: {r['rps']:>7,.0f} records/s (boto3 loop {boto3[s][-1]:,.0f}, "
                f"read floor {floor[s][-1]:,.0f}; "
                f"session up to last batch "
                f"{r['rps_wall'] or 0:,}, after the first micro-batch {r['rps_warm'] or 0:,}), "
                f"{r['batches']} micro-batches ({r['batches_with_records']} with records), "
                f"{r['spark_jobs']} Spark jobs, tree CPU "
                f"{r['cpu_s']:.1f} s, wall {r['wall_s']:.0f} s; moto CPU "
                f"{r['emulator_cpu_s']:.1f} s, busy {r['emulator_busy']} of the micro-batches "
                f"(the machine {r['machine_busy']} cores)"
            )
        data = {s: median_run(done) for s, done in runs.items()}
        idle = spark_idle.idle_pairs(endpoint, tmp, ends, args.idle_seconds, args.idle_pairs)
        job, bare = startup_runs(endpoint, tmp, "startup")
        spark = local_spark_session("spark-bench-styles")
        try:
            styles = spark_styles.style_figures(
                spark,
                client,
                endpoint,
                tmp,
                f"data-{args.shards[0]}",
                args.records,
                boto3_loop,
                plain,
            )
        finally:
            spark.stop()
    return Measured(data, boto3, floor, idle, job, bare, styles)


def figures(args: argparse.Namespace, m: Measured) -> dict[str, Any]:
    """Every figure of the module docstring, rounded, in one flat dict."""
    lo, hi = args.shards[0], args.shards[-1]
    out: dict[str, Any] = {
        "records": args.records,
        "record_bytes": args.size,
        "shards": args.shards,
        "master": job_runs.MASTER,
        "read_on": "executors",
    }
    out["rounds"] = args.rounds
    for s, r in m.data.items():
        out.update({f"{k}_{s}": round(v) if k == "rps" else v for k, v in r.items()})
    out[f"shards_{hi}_vs_{lo}"] = round(m.data[hi]["rps"] / m.data[lo]["rps"], 3)
    for kind in ("wall", "warm"):
        pair = (m.data[hi][f"rps_{kind}"], m.data[lo][f"rps_{kind}"])
        out[f"shards_{hi}_vs_{lo}_{kind}"] = round(pair[0] / pair[1], 3) if all(pair) else None
    for s, loops in m.boto3.items():
        out[f"boto3_rps_{s}"] = round(statistics.median(loops))
        out[f"boto3_rps_runs_{s}"] = [round(x) for x in loops]
    out[f"boto3_shards_{hi}_vs_{lo}"] = round(
        statistics.median(m.boto3[hi]) / statistics.median(m.boto3[lo]), 3
    )
    for s, floors in m.floor.items():
        out[f"read_floor_rps_{s}"] = round(statistics.median(floors))
        out[f"read_floor_rps_runs_{s}"] = [round(x) for x in floors]
    floor_ratio = statistics.median(m.floor[hi]) / statistics.median(m.floor[lo])
    out[f"read_floor_{hi}_vs_{lo}"] = round(floor_ratio, 3)
    out[f"shards_{hi}_vs_{lo}_of_floor"] = round(out[f"shards_{hi}_vs_{lo}"] / floor_ratio, 3)
    jobs = m.data[hi]["spark_jobs"]
    out["spark_jobs_per_batch"] = round(jobs / m.data[hi]["batches"], 2)
    out["spark_jobs_per_batch_with_records"] = round(jobs / m.data[hi]["batches_with_records"], 2)
    out.update(spark_idle.idle_figures(m.idle))
    job, bare = statistics.median(m.startup_job), statistics.median(m.startup_bare)
    out["startup_job_s"], out["startup_bare_s"] = round(job, 2), round(bare, 2)
    out["startup_job_s_runs"] = [round(x, 2) for x in m.startup_job]
    out["startup_bare_s_runs"] = [round(x, 2) for x in m.startup_bare]
    pairs = [j - b for j, b in zip(m.startup_job, m.startup_bare, strict=True)]
    out["startup_overhead_s"] = round(statistics.median(pairs), 2)
    out["startup_overhead_s_runs"] = [round(x, 2) for x in pairs]
    out["startup_overhead_of_medians_s"] = round(job - bare, 2)
    out.update(m.styles)
    return out


def print_summary(result: dict[str, Any], shards: list[int]) -> None:
    lo, hi = shards[0], shards[-1]
    print(
        f"records/s at {hi} shards over {lo}: {result[f'shards_{hi}_vs_{lo}']:.2f} (summary "
        f"lines; session up to last batch {result[f'shards_{hi}_vs_{lo}_wall']}, after the first "
        f"micro-batch {result[f'shards_{hi}_vs_{lo}_warm']}); a plain boto3 loop on the same "
        f"streams: {result[f'boto3_shards_{hi}_vs_{lo}']:.2f}; the read tasks' reads alone "
        f"(the read floor): {result[f'read_floor_{hi}_vs_{lo}']:.2f}, the job "
        f"{result[f'shards_{hi}_vs_{lo}_of_floor']:.2f}x that"
    )
    print(
        f"moto's CPU per second of the micro-batches with records: "
        f"{result[f'emulator_busy_{hi}']} at {hi} shards, {result[f'emulator_busy_{lo}']} at "
        f"{lo} (1.0: its one process is the bound); over the whole run "
        f"{result[f'emulator_cpu_s_{hi}']} s against {result[f'emulator_cpu_s_{lo}']} s; "
        f"the machine's cores busy in them {result[f'machine_busy_{hi}']} and "
        f"{result[f'machine_busy_{lo}']}"
    )
    print(
        f"Spark jobs per micro-batch at {hi} shards: {result['spark_jobs_per_batch']:.2f} "
        f"(per micro-batch with records: {result['spark_jobs_per_batch_with_records']:.2f})"
    )
    print(
        f"idle: {result['idle_cpu_ms_per_shard_s']:.1f} ms of CPU per shard-second (median "
        f"of pairs {', '.join(f'{x:.2f}' for x in result['idle_cpu_ms_per_shard_s_runs'])}, "
        f"whole runs; over the idle window only: "
        f"{result['idle_window_cpu_ms_per_shard_s']:.1f}); "
        f"idle at {hi} shards the job keeps {result[f'idle_cores_{hi}']:.2f} cores busy, "
        f"at {lo} {result[f'idle_cores_{lo}']:.2f}"
    )
    print(
        f"start-up overhead: {result['startup_overhead_s']:.1f} s (median of {STARTUP_RUNS} "
        f"pairs: {', '.join(f'{x:.1f}' for x in result['startup_overhead_s_runs'])}; launch "
        f"to first record {result['startup_job_s']:.1f} s, bare PySpark to its first task "
        f"done {result['startup_bare_s']:.1f} s, medians: "
        f"{result['startup_overhead_of_medians_s']:.1f} s apart)"
    )
    for key in ("transform", "fanout"):
        print(
            f"{key} on the executors: {result[f'{key}_vs_boto3']:.2f}x the boto3 loop on its "
            "stream (goal >= 1.0)"
        )


def shards_main(args: argparse.Namespace, boto3_loop: BotoLoop) -> int:
    """``spark_bench.py --shards``: measure, print, and finish as the other modes do."""
    started = time.perf_counter()
    result = figures(args, measure(args, boto3_loop))
    result["bench_seconds"] = round(time.perf_counter() - started)
    print_summary(result, args.shards)
    return finish_bench(chart(args.shards), result, args.plot, args.json)
