"""Failed Spark jobs to find a record that kills every task that reads it.

Usage: ``python bench/isolation_bench.py [--limits 200,1000,10000] [--json]``

A record that kills its Python worker fails the whole Spark job of its read plan; the
driver isolates it by running parts of the plan again (:mod:`kinesis_spout.spark.read.jobs`).
Each failed job costs about a second of Spark restarting the worker, so what counts is how
many fail. For a plan of ``limit`` records, with the killer at every position in turn, this
runs the real :class:`~kinesis_spout.spark.read.jobs.ReadJobs` over a simulated shard (no
Spark: ``collect`` reads the shard's records from the plan's position, and fails when the
read would take the killer), and counts the failed jobs until the killer fails alone:

* ``failed_jobs_mean_<limit>`` and ``failed_jobs_max_<limit>``: this release (the rest of
  a plan is read on from where a good half stopped, in the same micro-batch);
* ``before_mean_<limit>`` / ``before_max_<limit>``: the release before, as a model (the
  micro-batch ended after a good half; the next one failed on the whole limit again).

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kinesis_spout.config import InitialPosition  # noqa: E402
from kinesis_spout.records import GetterPosition, ReadEnd  # noqa: E402
from kinesis_spout.spark.plan import ReadPlan, ReadResult, ReadSettings  # noqa: E402
from kinesis_spout.spark.read.jobs import ReadJobs  # noqa: E402
from tracker import SequenceKey  # noqa: E402

START = GetterPosition(None, None, True, InitialPosition.TRIM_HORIZON, None)
"""A plan's position at the shard's start."""


def position_after(last: int) -> GetterPosition:
    """The position after record ``last`` (1-based; 0: the shard's start)."""
    return dataclasses.replace(START, after=SequenceKey(last, 0) if last else None)


class _Context:
    defaultParallelism = 2


class _Spark:
    sparkContext = _Context()


class SimulatedShardJobs(ReadJobs):
    """:class:`ReadJobs` over a simulated shard of records 1..n: a job whose read would
    take a record in ``killers`` fails as a whole (as a record that kills its Python
    worker fails every task that processes it); ``failed_jobs`` counts them."""

    def __init__(self, n: int, killers: set[int]) -> None:
        settings = ReadSettings("r", None, 100, 5.0, 0.1, 1.0, 1.0)
        super().__init__(_Spark(), lambda r: None, settings)
        self.n, self.killers, self.failed_jobs = n, killers, 0

    def collect(self, batch_id: int, plans: list[ReadPlan]) -> list[ReadResult]:
        out = []
        for plan in plans:
            assert plan.position is not None
            after = plan.position.after
            start = after.sequence if after is not None else 0
            keys = list(range(start + 1, min(start + plan.limit, self.n) + 1))
            if self.killers & set(keys):
                self.failed_jobs += 1
                raise RuntimeError("Python worker exited unexpectedly (crashed)")
            res = ReadResult(plan.task, plan.stream, plan.shard_id, seqs=[str(k) for k in keys])
            res.subs, res.ok = [0] * len(keys), bytearray([1] * len(keys))
            last = keys[-1] if keys else start
            res.end = ReadEnd(position_after(last), taken=len(keys), caught_up=last >= self.n)
            out.append(res)
        return out


def failed_jobs(killer: int, limit: int) -> int:
    """Failed jobs of this release until the killer (1-based) fails alone."""
    jobs = SimulatedShardJobs(limit, {killer})
    jobs.run(1, [ReadPlan(1, "s", "shard", START, limit=limit)])
    return jobs.failed_jobs


def failed_jobs_before(killer: int, limit: int) -> int:
    """The release before, as a model: each micro-batch halves a failing plan until a
    half reads ok (the micro-batch ends there) or one record fails alone."""
    read = fails = 0
    while True:
        part = limit
        while read + part >= killer:
            fails += 1
            if part == 1:
                return fails
            part //= 2
        read += part


def figures(limits: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {"limits": limits}
    for limit in limits:
        now = [failed_jobs(k, limit) for k in range(1, limit + 1)]
        before = [failed_jobs_before(k, limit) for k in range(1, limit + 1)]
        out[f"failed_jobs_mean_{limit}"] = round(statistics.mean(now), 1)
        out[f"failed_jobs_max_{limit}"] = max(now)
        out[f"before_mean_{limit}"] = round(statistics.mean(before), 1)
        out[f"before_max_{limit}"] = max(before)
        print(
            f"limit {limit:>6,}: {statistics.mean(now):5.1f} failed jobs on average, "
            f"{max(now)} at most (1 + log2 of the limit: {1 + math.ceil(math.log2(limit))}); "
            f"the release before {statistics.mean(before):.1f} and {max(before)}",
            flush=True,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limits", default="200,1000,10000", help="plan limits, comma-separated")
    parser.add_argument("--json", action="store_true", help="one JSON object on the last line")
    args = parser.parse_args(argv)
    logging.getLogger("kinesis_spout").setLevel(logging.ERROR)  # a warning per failed job
    limits = [int(x) for x in args.limits.split(",") if x.strip()]
    result = figures(limits)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
