"""Checkpoint write cost, and how many writes the spout makes.

Starts a standalone ZooKeeper (from PySpark's jars) and a moto server (Kinesis, and
DynamoDB over HTTP through ``AWS_ENDPOINT_URL_DYNAMODB``), then:

(a) write latency: ``--writes`` checkpoint saves of one shard, each one
    further than the last, timed one by one, for
    * the file store (write temp file, fsync, rename, fsync dir, under flock),
    * the ZooKeeper store (read + compare-and-set ``setData``),
    * the ZooKeeper store fenced by a lease (read + transaction: check the
      lease epoch, ``setData``), as used by multi-worker runs;
    * the DynamoDB store (one conditional PutItem on the version read), and the same
      under the job's lease (a TransactWriteItems: the lease check and the put), as the
      Spark job and the spout write;
    reported as p50 / p99 milliseconds;
(b) writes per 100,000 records: the spout reads ``--records`` records from a
    4-shard stream with the default config (file store, checkpoint every
    5 s and on close) and acks each batch at once; the checkpoint writes it
    made are scaled to 100,000 records (one write per record would be 100,000).

(c) a checkpoint round of many shards in the file store: every one of ``--round-shards``
    shards (128 and 1,000) moved, saved as the reader saves a round (one ``save_many``:
    one read and one write of the stream's file), against the same round saved shard by
    shard (``save`` each: a read and a write of the whole file per shard, as rounds
    were saved before), in the same process, each the median of 5 rounds
    (``file_round_ms_<N>``, ``file_round_one_by_one_ms_<N>``, and their ratio
    ``file_round_speedup_<N>``); and the same round in the ZooKeeper store, a node per
    shard: one ``save_many`` (every read in flight together, then every write) against
    ``save`` each (a read and a write waited for per shard, as rounds were saved before),
    median of 3 (``zk_round_ms_<N>``, ``zk_round_one_by_one_ms_<N>``,
    ``zk_round_speedup_<N>``); and in the DynamoDB store, an item per shard, a table per
    round: one ``save_many`` (a conditional PutItem per shard, in flight together) against
    ``save`` each, median of 3 (``dynamodb_round_ms_<N>``,
    ``dynamodb_round_one_by_one_ms_<N>``), and one ``save_many`` under the job's lease
    (transactions of 99 shards and the lease check, in flight together;
    ``dynamodb_fenced_round_ms_<N>``). moto's server answers these, not DynamoDB: its
    figures are its own (a transaction copies the table it touches).

With ``--json`` the last line is one JSON object; ``--plot FILE`` also draws the
latencies as a PNG bar chart (the ``plots`` extra).

    python bench/checkpoint_bench.py [--writes 1000] [--records 100000] [--json] [--plot FILE]
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from kazoo.client import KazooClient  # noqa: E402

from devkit.plots import (  # noqa: E402
    Bar,
    BarChart,
    Panel,
    Series,
    add_plot_argument,
    check_plot_argument,
    finish_bench,
)
from kinesis_spout.checkpoint.base import CheckpointStore  # noqa: E402
from kinesis_spout.checkpoint.dynamodb import DynamoDbCheckpointStore  # noqa: E402
from kinesis_spout.checkpoint.dynamodb_lease import DynamoDbJobLease  # noqa: E402
from kinesis_spout.checkpoint.file import FileCheckpointStore  # noqa: E402
from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore  # noqa: E402
from kinesis_spout.config import SpoutConfig  # noqa: E402
from kinesis_spout.kinesis.client import make_client  # noqa: E402
from kinesis_spout.records import Checkpoint  # noqa: E402
from kinesis_spout.spout import KinesisSpout  # noqa: E402
from kinesis_spout.testing.servers import MotoServer, ZooKeeperServer  # noqa: E402
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records  # noqa: E402

SHARDS = 4
STREAM = "bench-checkpoints"
SHARD = "shardId-000000000000"


def percentile(samples: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank."""
    ordered = sorted(samples)
    idx = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[idx]


def time_writes(store: CheckpointStore, n: int, stream: str = STREAM) -> list[float]:
    """Milliseconds of each of ``n`` forward saves (after 20 untimed warm-up saves)."""
    seq = 1_000
    for _ in range(20):
        seq += 1
        store.save(Checkpoint(stream, SHARD, str(seq)))
    out = []
    for _ in range(n):
        seq += 1
        cp = Checkpoint(stream, SHARD, str(seq))
        t0 = time.perf_counter()
        store.save(cp)
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def time_rounds(directory: Path, shards: int, rounds: int = 5) -> tuple[float, float]:
    """Median milliseconds of a checkpoint round of ``shards`` shards that all moved, in
    a file store: as one ``save_many``, and as one ``save`` per shard."""
    return time_store_rounds(
        lambda n: FileCheckpointStore(directory / f"rounds-{shards}-{n}", "bench"), shards, rounds
    )


def time_store_rounds(
    open_one: Callable[[int], CheckpointStore], shards: int, rounds: int = 5
) -> tuple[float, float]:
    """Median milliseconds of a checkpoint round of ``shards`` shards that all moved, in
    the store ``open_one(round)`` opens: as one ``save_many``, and as one ``save`` each."""
    ids = [f"shardId-{i:012d}" for i in range(shards)]
    seq = 1_000

    def round_of() -> list[Checkpoint]:
        nonlocal seq
        seq += 1
        return [Checkpoint(STREAM, shard, str(seq)) for shard in ids]

    many, one_by_one = [], []
    for n in range(rounds):
        store = open_one(n)
        store.save_many(round_of())  # the file holds every shard, as in a running job
        t0 = time.perf_counter()
        store.save_many(round_of())
        many.append((time.perf_counter() - t0) * 1000.0)
        t0 = time.perf_counter()
        for cp in round_of():
            store.save(cp)
        one_by_one.append((time.perf_counter() - t0) * 1000.0)
        store.close()
    return statistics.median(many), statistics.median(one_by_one)


def time_fenced_rounds(shards: int, rounds: int = 3) -> float:
    """Median milliseconds of a round of ``shards`` shards, one ``save_many`` in a DynamoDB
    store under its job's lease (a table per round)."""
    ids = [f"shardId-{i:012d}" for i in range(shards)]
    out = []
    for n in range(rounds):
        url = f"dynamodb://bench-fenced-{shards}-{n}"
        lease = DynamoDbJobLease.open(url, "bench")
        lease.acquire()
        store = DynamoDbCheckpointStore.from_url(url, "bench", owner="b")
        try:
            store.save_many([Checkpoint(STREAM, s, "1000") for s in ids])
            t0 = time.perf_counter()
            store.save_many([Checkpoint(STREAM, s, "1001") for s in ids])
            out.append((time.perf_counter() - t0) * 1000.0)
        finally:
            store.close()
            lease.release()
    return statistics.median(out)


def dynamodb_round_store(shards: int, n: int) -> CheckpointStore:
    """A DynamoDB store of a table of its own, for round ``n`` of ``shards`` shards."""
    return DynamoDbCheckpointStore.from_url(f"dynamodb://bench-rounds-{shards}-{n}", "bench")


def dynamodb_figures(args: argparse.Namespace, result: dict[str, Any]) -> dict[str, list[float]]:
    """The DynamoDB store's write latencies (plain and under the job's lease) and rounds."""
    store = DynamoDbCheckpointStore.from_url("dynamodb://bench-writes", "bench", owner="b")
    lease = DynamoDbJobLease.open("dynamodb://bench-fenced-writes", "bench")
    fenced = DynamoDbCheckpointStore.from_url("dynamodb://bench-fenced-writes", "bench")
    try:
        plain_ms = time_writes(store, args.writes)
        lease.acquire()
        fenced_ms = time_writes(fenced, args.writes)
    finally:
        lease.release()
        store.close()
        fenced.close()
    for n in args.round_shards:
        many, one_by_one = time_store_rounds(functools.partial(dynamodb_round_store, n), n, 3)
        result[f"dynamodb_round_ms_{n}"] = round(many, 1)
        result[f"dynamodb_round_one_by_one_ms_{n}"] = round(one_by_one, 1)
        result[f"dynamodb_round_speedup_{n}"] = round(one_by_one / many, 1)
        result[f"dynamodb_fenced_round_ms_{n}"] = round(time_fenced_rounds(n), 1)
    return {"dynamodb_write_ms": plain_ms, "dynamodb_fenced_write_ms": fenced_ms}


def zk_round_store(zk: ZooKeeperServer, shards: int, n: int) -> CheckpointStore:
    """A ZooKeeper store of a job of its own, for round ``n`` of ``shards`` shards."""
    return ZooKeeperCheckpointStore.from_url(zk.url("/bench"), f"rounds-{shards}-{n}", owner="b")


def zk_fenced(store: ZooKeeperCheckpointStore, hosts: str, stream: str) -> None:
    """Make ``store`` hold a lease epoch for SHARD, as a coordinator would."""
    raw = KazooClient(hosts)
    raw.start()
    try:
        path = store.paths.lease(stream, SHARD)
        raw.ensure_path(path)
        epoch = int(raw.set(path, b"{}").version)
    finally:
        raw.stop()
        raw.close()
    store.require_leases(stream)
    store.set_lease(stream, SHARD, epoch)


def count_spout_writes(moto: MotoServer, records: int, workdir: Path) -> dict[str, Any]:
    """Read ``records`` records with the default config; count checkpoint writes."""
    client = make_client(moto.endpoint_url, "us-east-1")
    create_stream(client, STREAM, SHARDS)
    t0 = time.monotonic()
    put_records(client, STREAM, make_payloads(records, size=200))
    put_seconds = time.monotonic() - t0
    config = SpoutConfig(
        stream_name=STREAM,
        endpoint_url=moto.endpoint_url,
        checkpoint_store=f"file://{workdir / 'checkpoints'}",
        dead_letter=str(workdir / "dead"),
    )
    spout = KinesisSpout(config, client=client)
    spout.open()
    done = 0
    t0 = time.monotonic()
    deadline = t0 + 600
    while done < records and time.monotonic() < deadline:
        batch = spout.next_batch(config.batch_size)
        if batch:
            spout.ack_many(batch)
            done += len(batch)
        else:
            time.sleep(min(spout.poll_delay(), 0.05))
    spout.close()  # the final checkpoint of each shard
    seconds = time.monotonic() - t0
    writes = spout.stats().checkpoint_writes
    return {
        "records": done,
        "read_seconds": round(seconds, 3),
        "put_seconds": round(put_seconds, 3),
        "checkpoint_interval": config.checkpoint_interval,
        "checkpoint_writes": writes,
        "writes_per_100k_records": round(writes * 100_000 / max(done, 1), 2),
    }


CHART = BarChart(
    "checkpoint_bench: one checkpoint write, {writes_timed:,} timed per store",
    (
        Panel(
            "write latency",
            "ms per write (log scale; lower is better)",
            (
                Bar("file store (fsync)", "file_write_ms"),
                Bar("ZooKeeper (compare-and-set)", "zk_write_ms"),
                Bar("ZooKeeper, lease-fenced", "zk_fenced_write_ms"),
                Bar("DynamoDB (moto, conditional put)", "dynamodb_write_ms"),
                Bar("DynamoDB (moto), lease-fenced", "dynamodb_fenced_write_ms"),
            ),
            (Series("p50", "{}_p50"), Series("p99", "{}_p99"), Series("mean", "{}_mean")),
            log=True,
        ),
    ),
    note="the spout at the default {checkpoint_interval:g} s interval: {checkpoint_writes} "
    "writes for {records:,} records = {writes_per_100k_records:g} per 100,000 "
    "(one per record would be 100,000)",
)
"""The chart ``--plot FILE`` draws."""


STATS = (
    "file_write_ms",
    "zk_write_ms",
    "zk_fenced_write_ms",
    "dynamodb_write_ms",
    "dynamodb_fenced_write_ms",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The flags; ``round_shards`` as a list of counts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--writes", type=int, default=1000, help="timed saves per store")
    parser.add_argument("--records", type=int, default=100_000, help="records the spout reads")
    parser.add_argument(
        "--round-shards",
        default="128,1000",
        help="shard counts of the stores' checkpoint rounds (default 128,1000)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    add_plot_argument(parser)
    args = parser.parse_args(argv)
    check_plot_argument(parser, args.plot)
    try:
        args.round_shards = [int(n) for n in args.round_shards.split(",") if n.strip()]
    except ValueError:
        parser.error(f"--round-shards {args.round_shards!r}: expected counts like 128,1000")
    if not args.round_shards or min(args.round_shards) < 1:
        parser.error(f"--round-shards {args.round_shards!r}: expected counts of 1 or more")
    return args


def say(result: dict[str, Any], args: argparse.Namespace, out: Callable[[str], None]) -> None:
    """The figures, in words."""
    out(f"checkpoint writes, {args.writes} timed saves each (ms):")
    for name in STATS:
        out(
            f"  {name[:-9]:<24} p50 {result[f'{name}_p50']:8.3f}   "
            f"p99 {result[f'{name}_p99']:8.3f}   mean {result[f'{name}_mean']:8.3f}"
        )
    for n in args.round_shards:
        out(
            f"file store, a checkpoint round of {n:,} shards: "
            f"{result[f'file_round_ms_{n}']:,.1f} ms in one write, "
            f"{result[f'file_round_one_by_one_ms_{n}']:,.1f} ms shard by shard "
            f"({result[f'file_round_speedup_{n}']}x)"
        )
        out(
            f"ZooKeeper, a checkpoint round of {n:,} shards: "
            f"{result[f'zk_round_ms_{n}']:,.1f} ms with its calls in flight together, "
            f"{result[f'zk_round_one_by_one_ms_{n}']:,.1f} ms shard by shard "
            f"({result[f'zk_round_speedup_{n}']}x)"
        )
        out(
            f"DynamoDB (moto), a checkpoint round of {n:,} shards: "
            f"{result[f'dynamodb_round_ms_{n}']:,.1f} ms with its puts in flight together, "
            f"{result[f'dynamodb_round_one_by_one_ms_{n}']:,.1f} ms shard by shard "
            f"({result[f'dynamodb_round_speedup_{n}']}x); under the job's lease "
            f"{result[f'dynamodb_fenced_round_ms_{n}']:,.1f} ms (transactions of 99)"
        )
    out(
        f"spout, default config ({SHARDS} shards, checkpoint every "
        f"{result['checkpoint_interval']:.0f} s): {result['records']} records read "
        f"in {result['read_seconds']:.1f} s with {result['checkpoint_writes']} "
        f"checkpoint writes = {result['writes_per_100k_records']} per 100,000 records "
        "(one per record would be 100,000)"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    result: dict[str, Any] = {"writes_timed": args.writes}
    with tempfile.TemporaryDirectory(prefix="ks-ckpt-bench-") as tmp:
        work = Path(tmp)
        file_store = FileCheckpointStore(work / "file-store", "bench")
        file_ms = time_writes(file_store, args.writes)
        file_store.close()
        for n in args.round_shards:
            many, one_by_one = time_rounds(work, n)
            result[f"file_round_ms_{n}"] = round(many, 1)
            result[f"file_round_one_by_one_ms_{n}"] = round(one_by_one, 1)
            result[f"file_round_speedup_{n}"] = round(one_by_one / many, 1)

        with ZooKeeperServer(workdir=work / "zk") as zk:
            zk_store = ZooKeeperCheckpointStore.from_url(zk.url("/bench"), "bench", owner="b")
            try:
                zk_ms = time_writes(zk_store, args.writes)
                for n in args.round_shards:
                    many, one_by_one = time_store_rounds(
                        functools.partial(zk_round_store, zk, n), n, 3
                    )
                    result[f"zk_round_ms_{n}"] = round(many, 1)
                    result[f"zk_round_one_by_one_ms_{n}"] = round(one_by_one, 1)
                    result[f"zk_round_speedup_{n}"] = round(one_by_one / many, 1)
                zk_fenced(zk_store, zk.hosts, STREAM + "-fenced")
                fenced_ms = time_writes(zk_store, args.writes, STREAM + "-fenced")
            finally:
                zk_store.close()

        with MotoServer(workdir=work / "moto") as moto:
            os.environ["AWS_ENDPOINT_URL_DYNAMODB"] = moto.endpoint_url
            dynamodb_ms = dynamodb_figures(args, result)
            result.update(count_spout_writes(moto, args.records, work))

    samples_of = {"file_write_ms": file_ms, "zk_write_ms": zk_ms, "zk_fenced_write_ms": fenced_ms}
    samples_of.update(dynamodb_ms)
    for name in STATS:
        samples = samples_of[name]
        result[f"{name}_p50"] = round(percentile(samples, 0.50), 3)
        result[f"{name}_p99"] = round(percentile(samples, 0.99), 3)
        result[f"{name}_mean"] = round(statistics.fmean(samples), 3)
    out: Callable[[str], None] = print
    say(result, args, out)
    return finish_bench(CHART, result, args.plot, args.json, sort_keys=True, say=out)


if __name__ == "__main__":
    sys.exit(main())
