"""Chaos run: does the Spark job lose anything when everything goes wrong?

Starts a moto server, a ZooKeeper and a fault-injecting proxy in front of moto;
puts ``--records`` records with unique ids into a 4-shard stream (1% of them
poison: the processing raises for them on every delivery); runs the Spark job
(``spark-submit kinesis_spout/spark/job.py``, ZooKeeper checkpoints, Parquet
sink, Kinesis through the proxy, which throttles, fails or drops ~12% of
calls) and, while it runs, SIGKILLs its process group ``--kills`` times at
seeded moments and restarts it, and stops ZooKeeper for a few seconds once.
The last run drains and stops when idle; then an auditor reads the sink, the
dead letters and every checkpoint value seen in ZooKeeper and prints: records
lost, duplicates (and the replay windows that explain them), poison records
dead-lettered, whether checkpoints were monotonic, and the times.

    python bench/chaos.py [--records 100000] [--kills 5] [--seed 1] [--read-on executors] [--json]
                          [--kpl] [--kill-worker-records N] [--plot chaos.png]

``--kpl`` puts most records as KPL aggregates of 2-50 user records (some
aggregates empty, a few corrupt: handed on whole); ``--kill-worker-records N``
makes N records end their Python worker on every delivery (isolated and
dead-lettered like poison; ``poison`` and ``dead_lettered`` count them too).

With ``--json`` the last line is one JSON object (``records``, ``lost``,
``duplicates``, ``kills``, ``max_in_flight``, ``poison``, ``dead_lettered``,
``checkpoints_monotonic`` ...). Exit status 0 when every check of the audit
passed, 1 otherwise. The figures are in ``docs/guarantees.md``.

``--plot FILE`` also draws the run over time into a PNG (needs matplotlib, the
``plots`` extra; checked before anything starts): sink rows per second, each
shard's checkpoint progress and the dead letters so far, with the kills and
restarts as vertical lines and ZooKeeper's outage shaded.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from devkit.chaos import (
    ChaosPlan,
    ChaosResult,
    draw_chaos_result,
    figures_json,
    run_chaos,
)
from devkit.plots import add_plot_argument, check_plot_argument, save_chart
from kinesis_spout.errors import KinesisSpoutError


def build_parser() -> argparse.ArgumentParser:
    defaults = ChaosPlan()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=defaults.records)
    p.add_argument("--kills", type=int, default=defaults.kills, help="SIGKILLs of the job")
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--shards", type=int, default=defaults.shards)
    p.add_argument("--poison-rate", type=float, default=defaults.poison_rate)
    p.add_argument("--zk-restarts", type=int, default=defaults.zk_restarts)
    p.add_argument("--zk-down", type=float, default=defaults.zk_down_seconds, metavar="SECONDS")
    p.add_argument("--throttle", type=float, default=defaults.throttle)
    p.add_argument("--error", type=float, default=defaults.error)
    p.add_argument("--drop", type=float, default=defaults.drop)
    p.add_argument("--records-per-call", type=int, default=defaults.records_per_call)
    p.add_argument("--batch-size", type=int, default=defaults.batch_size)
    p.add_argument("--max-in-flight", type=int, default=defaults.max_in_flight)
    p.add_argument("--checkpoint-interval", type=float, default=defaults.checkpoint_interval)
    p.add_argument(
        "--read-on",
        choices=("executors",),
        default=defaults.read_on,
        help="where the job reads Kinesis (default: %(default)s, the job's default)",
    )
    p.add_argument(
        "--processing",
        choices=("per-record", "fan-out"),
        default=defaults.processing,
        help="the chaos function per record, or a fan-out: each record split into words "
        "(anchored with the acker), written by the sink and counted (default: %(default)s)",
    )
    p.add_argument(
        "--kpl",
        action="store_true",
        help="put most records as KPL aggregates of 2-50 (some empty, a few corrupt)",
    )
    p.add_argument(
        "--kill-worker-records",
        type=int,
        default=defaults.kill_worker_records,
        metavar="N",
        help="N records whose processing ends its Python worker on every delivery",
    )
    p.add_argument("--timeout", type=float, default=defaults.timeout, metavar="SECONDS")
    p.add_argument("--workdir", type=Path, help="keep servers' data, job logs and outputs here")
    p.add_argument("--json", action="store_true", help="one JSON object on the last line")
    add_plot_argument(p)
    return p


def print_summary(result: ChaosResult) -> None:
    f = result.figures
    faults = f["faults"]
    print(
        f"records {f['records']:,} in {f['shards']} shards | kills {f['kills']} | "
        f"ZooKeeper restarts {f['zk_restarts']} | job runs {f['job_runs']}"
    )
    print(
        f"Kinesis calls {f['kinesis_calls']:,}, faults injected {faults['rate']:.1%} "
        f"(throttle {faults['throttle']}, 500 {faults['error']}, dropped {faults['drop']})"
    )
    for message in f["job_failure_messages"]:
        print(f"job {message} (restarted)")
    if f["drain_reruns"]:
        print(f"last run started again {f['drain_reruns']}x: it stopped while ZooKeeper was away")
    print(f"lost: {f['lost']}")
    print(
        f"duplicates: {f['duplicates']} (replay windows {f['replay_window']}; unexplained "
        f"{f['unexplained_duplicates']}; bound kills x max_in_flight x shards = "
        f"{f['kills']} x {f['max_in_flight']} x {f['shards']} = {f['duplicate_bound']})"
    )
    print(
        f"largest replay of one shard at one kill: {f['replay_window_max_per_shard']} "
        f"(bound: max_in_flight = {f['max_in_flight']})"
    )
    print(
        f"poison: {f['poison']}, dead-lettered {f['dead_lettered']} "
        f"({f['dead_letter_entries']} entries, {f['dead_letter_duplicates']} repeated by replays, "
        f"unexplained {f['unexplained_dead_letter_duplicates']}), in the sink "
        f"{f['poison_in_output']}"
    )
    print(
        f"checkpoints monotonic: {f['checkpoints_monotonic']} "
        f"({f['checkpoint_values_seen']} values seen); at the end of every shard: "
        f"{f['final_checkpoints_at_end']}"
    )
    phases = ", ".join(f"{k} {v:.1f}s" for k, v in f["phases"].items() if k != "total")
    print(f"time: {f['seconds']:.1f}s ({phases})")
    if result.guarantees_held:
        print("audit: guarantees held (nothing lost, every duplicate from a kill's replay)")
    else:
        print("audit: GUARANTEES BROKEN")
    for problem in result.problems:
        print(f"  - {problem}")
    if result.missed:
        print("the issue's criteria missed:")
    for item in result.missed:
        print(f"  - {item}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_plot_argument(parser, args.plot)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        plan = ChaosPlan(
            records=args.records,
            kills=args.kills,
            seed=args.seed,
            shards=args.shards,
            poison_rate=args.poison_rate,
            zk_restarts=args.zk_restarts,
            zk_down_seconds=args.zk_down,
            throttle=args.throttle,
            error=args.error,
            drop=args.drop,
            records_per_call=args.records_per_call,
            batch_size=args.batch_size,
            kpl=args.kpl,
            kill_worker_records=args.kill_worker_records,
            max_in_flight=args.max_in_flight,
            checkpoint_interval=args.checkpoint_interval,
            timeout=args.timeout,
            read_on=args.read_on,
            processing=args.processing,
        )
    except KinesisSpoutError as exc:
        print(f"chaos: error: {exc}", file=sys.stderr)
        if args.json:
            print(json.dumps({"ok": False, "error": str(exc)}))
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kinesis-spout-chaos-"))
    try:
        result = run_chaos(plan, workdir)
    except KinesisSpoutError as exc:
        print(f"chaos: the run could not be carried out: {exc}", file=sys.stderr)
        print(f"chaos: servers' data and job logs are in {workdir}", file=sys.stderr)
        if args.json:
            print(json.dumps({"ok": False, "error": str(exc).splitlines()[0]}))
        return 1
    print_summary(result)
    plotted = args.plot is None or plot_result(result, args.plot)
    if args.workdir is None and result.guarantees_held:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"servers' data, job logs and outputs: {workdir}")
    if args.json:
        print(figures_json(result))
    return 0 if result.ok and plotted else 1


def plot_result(result: ChaosResult, path: Path) -> bool:
    """Draw the run's chart into ``path``; False (after saying why) when it cannot be drawn."""
    return save_chart(lambda p: draw_chaos_result(result, p), path)


if __name__ == "__main__":
    sys.exit(main())
