"""Reader throughput: the spout against a plain boto3 loop and async-kinesis.

Starts a moto server, fills a 4-shard stream with 100,000 records of 200 bytes,
then reads the whole stream from TRIM_HORIZON, in one run:

(a) a plain boto3 GetRecords loop, round-robin over the shards, Limit 10,000,
    with a stock boto3 client: the ceiling (no tracking at all);
(b) the spout: ``next_batch`` + ``ack_many`` until every record was read and
    acked (memory checkpoint store, checkpoints every 5 s and on close);
(c) async-kinesis' ``Consumer`` on the same stream: the peer;
(d) the same plain loop as (a) but with the spout's client
    (``make_client``: botocore's tzlocal timestamp parsing replaced by a UTC
    one), to show how much of (b)'s margin over (a) comes from that.

For each: records/s (wall clock) and client CPU microseconds per record (this
process only; the moto server is a separate process). Ratios are against (a)
and (c) of the same run. ``--rounds N`` repeats the three readers N times and
reports the median of each. With ``--json`` the last line is one JSON object;
``--plot FILE`` also draws the figures as a PNG bar chart (the ``plots`` extra).

    python bench/reader_bench.py [--records 100000] [--rounds 3] [--json] [--plot FILE]

``--consumer efo`` measures the spout by enhanced fan-out against polling instead,
on LocalStack in host mode (``bench/reader_efo.py``; default 20,000 records, 3 rounds):

    python bench/reader_bench.py --consumer efo [--records 20000] [--json] [--plot FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

import boto3  # noqa: E402
from botocore.config import Config as BotoConfig  # noqa: E402

from devkit.plots import (  # noqa: E402
    Bar,
    BarChart,
    Panel,
    Series,
    add_plot_argument,
    check_plot_argument,
    finish_bench,
)
from kinesis_spout.kinesis.client import make_client  # noqa: E402
from kinesis_spout.testing.servers import MotoServer  # noqa: E402
from kinesis_spout.testing.streams import fill_stream  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reader_efo import Run, read_all, run_efo  # noqa: E402

SHARDS = 4
LIMIT = 10_000
TIMEOUT = 600.0


def _timed(name: str, fn: Callable[[], int]) -> Run:
    wall, cpu = time.perf_counter(), time.process_time()
    n = fn()
    return Run(name, n, time.perf_counter() - wall, time.process_time() - cpu)


def stock_client(endpoint: str) -> Any:
    """A boto3 client as anyone would make it (botocore retries off, like ours)."""
    cfg = BotoConfig(retries={"total_max_attempts": 1, "mode": "standard"})
    return boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1", config=cfg)


def read_boto3(endpoint: str, stream: str, expected: int) -> int:
    """The plain loop with a stock boto3 client: the ceiling the goal refers to."""
    return plain_loop(stock_client(endpoint), stream, expected)


def read_boto3_tuned(endpoint: str, stream: str, expected: int) -> int:
    """The plain loop with the spout's client (UTC timestamp parser): the spout's own ceiling."""
    return plain_loop(make_client(endpoint), stream, expected)


def plain_loop(client: Any, stream: str, expected: int) -> int:
    """Round-robin GetRecords over every shard until ``expected`` records were read."""
    shards = [s["ShardId"] for s in client.list_shards(StreamName=stream)["Shards"]]
    iterators = {
        s: client.get_shard_iterator(
            StreamName=stream, ShardId=s, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for s in shards
    }
    count = 0
    deadline = time.monotonic() + TIMEOUT
    while count < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"boto3 loop read {count} of {expected}")
        for s in shards:
            resp = client.get_records(ShardIterator=iterators[s], Limit=LIMIT)
            iterators[s] = resp["NextShardIterator"]
            count += len(resp["Records"])
    return count


def read_spout(endpoint: str, stream: str, expected: int) -> int:
    """The spout reads and acks everything (polling; ``reader_efo.read_all``)."""
    return read_all(endpoint, stream, expected, "polling").records


def read_async_kinesis(endpoint: str, stream: str, expected: int) -> int:
    """async-kinesis' Consumer, 5 GetRecords/s per shard like the spout."""
    from kinesis import Consumer, StringProcessor

    async def run() -> int:
        count = 0
        async with Consumer(
            stream,
            endpoint_url=endpoint,
            region_name="us-east-1",
            iterator_type="TRIM_HORIZON",
            record_limit=LIMIT,
            shard_fetch_rate=5,
            max_queue_size=LIMIT,
            processor=StringProcessor(),
            idle_timeout=30.0,
        ) as consumer:
            async for _item in consumer:
                count += 1
                if count >= expected:
                    break
        return count

    return asyncio.run(run())


READERS: dict[str, Callable[[str, str, int], int]] = {
    "boto3": read_boto3,
    "spout": read_spout,
    "async_kinesis": read_async_kinesis,
    "boto3_tuned": read_boto3_tuned,
}


_READERS = (
    Bar("boto3 loop", "boto3", baseline=True),
    Bar("spout", "spout"),
    Bar("async-kinesis", "async_kinesis", baseline=True),
    Bar("boto3 loop, the spout's client", "boto3_tuned", baseline=True),
)
CHART = BarChart(
    "reader_bench: {records:,} records of {record_bytes} B in {shards} shards, moto server",
    (
        Panel("read throughput", "records/s (higher is better)", _READERS, (Series("", "{}_rps"),)),
        Panel(
            "client CPU",
            "µs CPU per record (lower is better)",
            _READERS,
            (Series("", "{}_cpu_us_per_record"),),
        ),
    ),
    note="spout / boto3 loop {ratio_vs_boto3:.2f}x, spout / async-kinesis "
    "{ratio_vs_async_kinesis:.2f}x; median of {rounds} round(s)",
)
"""The chart ``--plot FILE`` draws."""

_CONSUMERS = (Bar("polling (GetRecords)", "polling", baseline=True), Bar("EFO", "efo"))
EFO_CHART = BarChart(
    "reader_bench --consumer efo: {records:,} records of {record_bytes} B in {shards} shards, "
    "LocalStack",
    (
        Panel(
            "read throughput", "records/s (higher is better)", _CONSUMERS, (Series("", "{}_rps"),)
        ),
        Panel(
            "client CPU",
            "µs CPU per record (lower is better)",
            _CONSUMERS,
            (Series("", "{}_cpu_us_per_record"),),
        ),
    ),
    note="efo / polling {efo_vs_polling:.2f}x records/s, {efo_cpu_vs_polling:.2f}x CPU per record; "
    "median of {rounds} round(s)",
)
"""The chart ``--plot FILE`` draws with ``--consumer efo``."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--consumer",
        choices=("peers", "efo"),
        default="peers",
        help="peers: the spout against boto3 loops and async-kinesis (moto); efo: the spout "
        "by enhanced fan-out against polling (LocalStack)",
    )
    parser.add_argument("--records", type=int, default=None, help="default 100000 (efo: 20000)")
    parser.add_argument("--size", type=int, default=200, help="bytes per record")
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="repeat the readers, report medians (default 1; efo: 3)",
    )
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    add_plot_argument(parser)
    args = parser.parse_args(argv)
    check_plot_argument(parser, args.plot)
    return args


def measure(records: int, size: int, rounds: int) -> dict[str, list[Run]]:
    """Every reader ``rounds`` times over one stream of ``records`` records; each run printed."""
    with MotoServer() as moto:
        stream = "reader-bench"
        put_seconds = fill_stream(make_client(moto.endpoint_url), stream, records, size, SHARDS)
        print(
            f"moto {moto.endpoint_url}: {records} records of {size} B on {SHARDS} "
            f"shards written in {put_seconds:.1f}s",
            flush=True,
        )
        runs: dict[str, list[Run]] = {name: [] for name in READERS}
        for rnd in range(rounds):
            for name, reader in READERS.items():
                run = _timed(name, lambda r=reader: r(moto.endpoint_url, stream, records))  # type: ignore[misc]
                if run.records < records:
                    raise SystemExit(f"{name} read {run.records} of {records}")
                runs[name].append(run)
                print(
                    f"round {rnd + 1} {name:>14}: {run.rps:9.0f} records/s  "
                    f"{run.cpu_us:6.1f} us CPU/record  ({run.seconds:.2f}s)",
                    flush=True,
                )
    return runs


def reader_figures(args: argparse.Namespace, runs: dict[str, list[Run]]) -> dict[str, Any]:
    """The median of each reader's runs, and the spout's ratios to the others."""

    def med(name: str, attr: str) -> float:
        return float(statistics.median(getattr(r, attr) for r in runs[name]))

    figures: dict[str, Any] = {
        "records": args.records,
        "record_bytes": args.size,
        "shards": SHARDS,
        "rounds": args.rounds,
    }
    for name in READERS:
        figures[f"{name}_rps"] = round(med(name, "rps"), 1)
        figures[f"{name}_cpu_us_per_record"] = round(med(name, "cpu_us"), 2)
    figures["ratio_vs_boto3"] = round(figures["spout_rps"] / figures["boto3_rps"], 3)
    figures["ratio_vs_async_kinesis"] = round(
        figures["spout_rps"] / figures["async_kinesis_rps"], 3
    )
    figures["cpu_ratio_vs_boto3"] = round(
        figures["spout_cpu_us_per_record"] / figures["boto3_cpu_us_per_record"], 3
    )
    figures["ratio_vs_boto3_tuned"] = round(figures["spout_rps"] / figures["boto3_tuned_rps"], 3)
    return figures


def print_summary(figures: dict[str, Any]) -> None:
    """A table of the readers' medians, then the spout's ratios against the goals."""
    print()
    print(f"{'reader':>14} {'records/s':>10} {'us CPU/rec':>11}")
    for name in READERS:
        print(
            f"{name:>14} {figures[f'{name}_rps']:>10.0f} "
            f"{figures[f'{name}_cpu_us_per_record']:>11.1f}"
        )
    print(
        f"spout / boto3 loop: {figures['ratio_vs_boto3']:.2f}x (goal >= 0.9);  "
        f"spout / async-kinesis: {figures['ratio_vs_async_kinesis']:.2f}x (goal >= 1.5);  "
        f"spout / boto3 loop with the spout's client: {figures['ratio_vs_boto3_tuned']:.2f}x"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.consumer == "efo":
        efo = run_efo(args.records or 20_000, args.size, args.rounds or 3)
        return finish_bench(EFO_CHART, efo, args.plot, args.json, sort_keys=True)
    args.records = args.records or 100_000
    args.rounds = args.rounds or 1
    figures = reader_figures(args, measure(args.records, args.size, args.rounds))
    print_summary(figures)
    return finish_bench(CHART, figures, args.plot, args.json, sort_keys=True)


if __name__ == "__main__":
    sys.exit(main())
