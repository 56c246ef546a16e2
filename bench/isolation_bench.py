"""What a record that kills its Python process costs the per-record style, and what
the sandbox costs a clean record.

Usage: ``python bench/isolation_bench.py [--limits 200,1000,10000] [--positions 5] [--json]``

Starts a moto server and, per limit, puts ``limit`` records into a one-shard stream,
one of them a *killer* (its function calls ``os._exit``). It reads the shard with a
read task's sandbox (:class:`~kinesis_spout.spark.sandbox.Sandbox`, in this process),
plan after plan as the job's loop does (each plan from the last one's end), with the
killer at ``--positions`` spread places in turn, and counts every call of the function:

* ``redeliveries_<limit>``: calls beyond the first of records other than the killer
  (the goal: 0; the release before re-ran what ran before the killer in each half of
  its bisect);
* ``killer_calls_<limit>``: calls of the killer before it is failed (1);
* ``kill_cost_ms_<limit>``: the extra time of a read with a killer over one without.

Then the clean path: ``sandbox_us_per_record`` and ``in_process_us_per_record``, a
read plan of 20,000 records read and processed by a no-op function in the sandbox and
in this process (``run_plans``), and their difference. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kinesis_spout.config import InitialPosition  # noqa: E402
from kinesis_spout.records import GetterPosition, Record  # noqa: E402
from kinesis_spout.spark.plan import ReadPlan, ReadSettings  # noqa: E402
from kinesis_spout.spark.sandbox import Sandbox  # noqa: E402
from kinesis_spout.spark.task import run_plans  # noqa: E402
from kinesis_spout.testing.servers import MotoServer  # noqa: E402
from kinesis_spout.testing.streams import (  # noqa: E402
    create_stream,
    emulator_client,
    put_records,
)

START = GetterPosition(None, None, True, InitialPosition.TRIM_HORIZON, None)
KILLER = b"kill"


class CountCalls:
    """The function under test: each call's sequence number appended to a file (the
    sandbox's child runs it); a killer ends the process."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __call__(self, r: Record) -> None:
        with open(self.path, "a") as f:
            f.write(r.sequence_number + "\n")
        if r.data == KILLER:
            os._exit(9)


def read_shard(box: Sandbox, settings: ReadSettings, stream: str, fn: Any, limit: int) -> int:
    """Read the shard to its tip, plan after plan, as the job's planner does (a record
    that failed a read alone is fetched by the next plan); the plans it took."""
    position, plans, fetch = START, 0, None
    while True:
        plan = ReadPlan(
            plans, stream, "shardId-000000000000", position, 1 if fetch else limit, fetch=fetch
        )
        (res,) = box.run([plan], settings, fn, plans)
        plans += 1
        end = res.end
        assert end is not None and end.position is not None
        if plan.fetch is not None and not len(res):
            position = end.position  # a gap before the record: fetch again
            continue
        position, fetch = end.position, res.poisoned
        if end.caught_up and not end.taken:
            return plans


def killer_figures(endpoint: str, limit: int, positions: int, work: Path) -> dict[str, Any]:
    client = emulator_client(endpoint)
    box = Sandbox()
    settings = ReadSettings("us-east-1", endpoint, 1000, 100.0, 0.05, 0.5, 5.0)
    redeliveries, killer_calls, costs = [], [], []
    try:
        for p in range(positions + 1):
            at = None if p == positions else (p * limit) // positions + (limit // (2 * positions))
            stream = f"iso-{limit}-{p}"
            create_stream(client, stream, 1)
            items = [(f"k{i}", KILLER if i == at else b"r%d" % i) for i in range(limit)]
            put = put_records(client, stream, items)
            calls_file = work / f"calls-{stream}"
            t0 = time.perf_counter()
            read_shard(box, settings, stream, CountCalls(calls_file), limit)
            seconds = time.perf_counter() - t0
            calls = Counter(calls_file.read_text().split())
            missing = {seq for _, seq in put} - set(calls)
            assert not missing, f"{len(missing)} records not read, killer at {at}"
            if at is None:
                clean = seconds
                continue
            killer = put[at][1]
            killer_calls.append(calls[killer])
            redeliveries.append(sum(n - 1 for seq, n in calls.items() if seq != killer))
            costs.append(seconds)
    finally:
        box._forget([])
    return {
        f"redeliveries_{limit}": max(redeliveries),
        f"killer_calls_{limit}": max(killer_calls),
        f"kill_cost_ms_{limit}": round((statistics.median(costs) - clean) * 1000, 1),
    }


def _noop(r: Record) -> None:
    return None


def clean_path_figures(endpoint: str, n: int = 20_000) -> dict[str, Any]:
    """One read plan of ``n`` records, read and processed by a no-op in the sandbox and
    in this process (best of three each)."""
    client = emulator_client(endpoint)
    create_stream(client, "iso-clean", 1)
    put_records(client, "iso-clean", [(f"k{i}", b"x" * 100) for i in range(n)])
    settings = ReadSettings("us-east-1", endpoint, 10_000, 100.0, 0.05, 0.5, 30.0)
    plan = ReadPlan(0, "iso-clean", "shardId-000000000000", START, n)
    box = Sandbox()
    sandboxed, in_process = [], []
    try:
        box.run([replace(plan, limit=1)], settings, _noop, 0)  # the child forked, imports done
        for _ in range(3):
            t0 = time.perf_counter()
            (res,) = box.run([plan], settings, _noop, 0)
            sandboxed.append(time.perf_counter() - t0)
            assert len(res) == n
            t0 = time.perf_counter()
            (res,) = run_plans([plan], settings, _noop, 0)
            in_process.append(time.perf_counter() - t0)
            assert len(res) == n
    finally:
        box._forget([])
    return {
        "sandbox_us_per_record": round(min(sandboxed) / n * 1e6, 2),
        "in_process_us_per_record": round(min(in_process) / n * 1e6, 2),
        "sandbox_overhead_us_per_record": round((min(sandboxed) - min(in_process)) / n * 1e6, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limits", default="200,1000,10000", help="plan limits, comma-separated")
    parser.add_argument("--positions", type=int, default=5, help="killer positions per limit")
    parser.add_argument("--json", action="store_true", help="one JSON object on the last line")
    args = parser.parse_args(argv)
    logging.getLogger("kinesis_spout").setLevel(logging.ERROR)  # a warning per killer
    limits = [int(x) for x in args.limits.split(",") if x.strip()]
    out: dict[str, Any] = {"limits": limits, "positions": args.positions}
    with tempfile.TemporaryDirectory() as tmp, MotoServer() as moto:
        for limit in limits:
            figs = killer_figures(moto.endpoint_url, limit, args.positions, Path(tmp))
            out.update(figs)
            print(
                f"limit {limit:>6,}: {figs[f'redeliveries_{limit}']} re-deliveries of other "
                f"records, the killer called {figs[f'killer_calls_{limit}']}x, "
                f"{figs[f'kill_cost_ms_{limit}']:.0f} ms per kill",
                flush=True,
            )
        clean = clean_path_figures(moto.endpoint_url)
    out.update(clean)
    print(
        f"clean path: {clean['sandbox_us_per_record']:.2f} µs per record in the sandbox, "
        f"{clean['in_process_us_per_record']:.2f} µs in process",
        flush=True,
    )
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
