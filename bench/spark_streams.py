"""``spark_bench.py --streams N``: the Spark job over N streams against one stream with as
many shards, run as users run it (``kinesis-spout run``, executor reads, ``local[2]``,
moto, a per-record no-op, the library's defaults).

* **single**: one stream of ``2 N`` shards holding ``--records`` records;
* **multi**: ``N`` streams of 2 shards, ``--records / N`` records each (the same records
  and shards in total), one job with ``streams = [...]``.

The two runs alternate, ``RUNS`` times each (single first). Their records/s is the job's
own summary figure (records done per second of processing); ``multi_stream_vs_single``
is the median of the multi runs over the median of the single runs (goal >= 0.9).

**Fairness.** One more multi run, with ``batch_size`` :data:`FAIR_BATCH` (at the default
of 10,000 records per shard and micro-batch the first micro-batch reads every record, and
any split would look fair). The bench scrapes the job's ``/metrics`` (its
``metrics_port``) every 0.2 s: records done per stream (``kinesis_spout_records_total``
by ``stream``, acked and dead-lettered). Over the first ``FAIR_SECONDS`` (10) of reading,
or until half the records are done if that comes first, each stream's share of the
records done is divided by its share of the records put; ``min_stream_share`` is the
smallest of those (goal >= 0.8).
"""

from __future__ import annotations

import argparse
import re
import socket
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import job_runs

from devkit.plots import Bar, BarChart, Panel, finish_bench
from kinesis_spout.config.streams import parse_streams
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client, make_payloads, put_records

RUNS = 3
FAIR_SECONDS = 10.0
FAIR_BATCH = 500
SHARDS_PER_STREAM = 2
DONE = re.compile(r"^kinesis_spout_records_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$", re.M)


def fill(client: Any, stream: str, shards: int, records: int, size: int) -> None:
    """A fresh stream of ``shards`` shards with ``records`` records spread evenly."""
    create_stream(client, stream, shards)
    items = [(f"pk-{i}", d) for i, (_, d) in enumerate(make_payloads(records, size))]
    put_records(client, stream, items)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_job(
    workdir: Path, streams: list[str], endpoint: str, port: int, batch: int | None
) -> Path:
    """The job's TOML file (:func:`job_runs.write_job`) over ``streams`` (one: as a job of
    one stream is configured), serving its metrics on ``port`` (``batch``: its
    ``batch_size``; None: the default)."""
    extra: dict[str, Any] = {"metrics_port": port}
    if len(streams) > 1:
        extra["streams"] = parse_streams(streams)
    if batch is not None:
        extra["batch_size"] = batch
    return job_runs.write_job(workdir, streams[0], endpoint, stop_when_idle=0.5, extra=extra)


def scrape(port: int) -> dict[str, float]:
    """Records done so far per stream (acked and dead-lettered), from ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
        text = resp.read().decode()
    done: dict[str, float] = {}
    for m in DONE.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        if labels.get("outcome") in ("acked", "dead_lettered"):
            stream = labels.get("stream", "")
            done[stream] = done.get(stream, 0.0) + float(m["value"])
    return done


class Sampler(threading.Thread):
    """Scrapes a job's metrics every 0.2 s until stopped: ``(time, done per stream)``."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.2):
            try:
                self.samples.append((time.time(), scrape(self.port)))
            except OSError:  # not listening yet, or gone
                continue


def shares(samples: list[tuple[float, dict[str, float]]], put: dict[str, int]) -> dict[str, Any]:
    """Each stream's share of the records done in the fairness window over its share of
    the records put (see the module docstring)."""
    started = [(t, d) for t, d in samples if sum(d.values()) > 0]
    if not started:
        raise RuntimeError("no records done seen in the job's metrics")
    t0, total = started[0][0], sum(put.values())
    window = started[-1]
    for t, d in started:
        if t - t0 > FAIR_SECONDS or sum(d.values()) >= total / 2:
            window = (t, d)
            break
    t, done = window
    n = sum(done.values())
    ratio = {s: (done.get(s, 0.0) / n) / (put[s] / total) for s in put}
    return {"window_s": round(t - t0, 2), "done_in_window": int(n), "share": ratio}


def one_run(
    endpoint: str, tmp: Path, streams: list[str], put: dict[str, int], batch: int | None = None
) -> dict[str, Any]:
    """The job over ``streams`` until idle: records/s, and the fairness of its reads."""
    workdir = job_runs.job_dir(tmp, f"streams-{len(streams)}")
    port = free_port()
    sampler = Sampler(port)
    sampler.start()
    try:
        run = job_runs.run_job(write_job(workdir, streams, endpoint, port, batch))
    finally:
        sampler.halt.set()
        sampler.join()
    done = int(run.summary()["done"])
    if done != sum(put.values()):
        raise RuntimeError(f"{streams}: the job did {done} of {sum(put.values())} records")
    out: dict[str, Any] = {"rps": run.records_per_second, "batches": len(run.batches())}
    if len(streams) > 1:
        out["fair"] = shares(sampler.samples, put)
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Fill the streams, then the single and multi runs, alternating."""
    n = args.streams
    single = "single"
    multi = [f"multi-{i}" for i in range(n)]
    with MotoServer() as moto, tempfile.TemporaryDirectory(prefix="spark-streams-") as tmpdir:
        tmp, endpoint = Path(tmpdir), moto.endpoint_url
        client = emulator_client(endpoint)
        fill(client, single, SHARDS_PER_STREAM * n, args.records, args.size)
        for name in multi:
            fill(client, name, SHARDS_PER_STREAM, args.records // n, args.size)
        put = dict.fromkeys(multi, args.records // n)
        singles, multis = [], []
        for i in range(RUNS):
            singles.append(one_run(endpoint, tmp, [single], {single: args.records}))
            print(f"run {i + 1}: 1 stream of {2 * n} shards: {singles[-1]['rps']:,.0f} records/s")
            multis.append(one_run(endpoint, tmp, multi, put))
            print(
                f"run {i + 1}: {n} streams of {SHARDS_PER_STREAM} shards: "
                f"{multis[-1]['rps']:,.0f} records/s"
            )
        fair = one_run(endpoint, tmp, multi, put, FAIR_BATCH)["fair"]
        print(
            f"fairness ({n} streams, batch_size {FAIR_BATCH}): in the first "
            f"{fair['window_s']} s ({fair['done_in_window']:,} done) each stream's share over "
            "its share put: " + ", ".join(f"{s} {r:.2f}" for s, r in fair["share"].items())
        )
    return {"single": singles, "multi": multis, "fair": fair}


def figures(args: argparse.Namespace, m: dict[str, Any]) -> dict[str, Any]:
    single = statistics.median(r["rps"] for r in m["single"])
    multi = statistics.median(r["rps"] for r in m["multi"])
    fair = m["fair"]
    return {
        "records": args.records,
        "record_bytes": args.size,
        "streams": args.streams,
        "shards_per_stream": SHARDS_PER_STREAM,
        "master": job_runs.MASTER,
        "read_on": "executors",
        "single_rps": round(single),
        "multi_rps": round(multi),
        "single_rps_runs": [round(r["rps"]) for r in m["single"]],
        "multi_rps_runs": [round(r["rps"]) for r in m["multi"]],
        "multi_stream_vs_single": round(multi / single, 3),
        "min_stream_share": round(min(fair["share"].values()), 3),
        "fair_batch_size": FAIR_BATCH,
        "fair_window_s": fair["window_s"],
        "fair_done_in_window": fair["done_in_window"],
        "stream_shares": {s: round(v, 3) for s, v in fair["share"].items()},
    }


def chart(n: int) -> BarChart:
    """The chart of ``--streams N --plot FILE``."""
    return BarChart(
        f"spark_bench --streams {n}: {{records:,}} records, executor reads, local[2], moto",
        (
            Panel(
                "throughput (medians)",
                "records/s (higher is better)",
                (
                    Bar(f"1 stream x {2 * n} shards", "single_rps", baseline=True),
                    Bar(f"{n} streams x 2 shards", "multi_rps"),
                ),
            ),
        ),
        note="multi_stream_vs_single {multi_stream_vs_single:.2f}; "
        "min_stream_share {min_stream_share:.2f}",
    )


def streams_main(args: argparse.Namespace) -> int:
    """``spark_bench.py --streams N``: measure, print, finish as the other modes do."""
    started = time.perf_counter()
    result = figures(args, measure(args))
    result["bench_seconds"] = round(time.perf_counter() - started)
    print(
        f"{args.streams} streams over 1 stream: {result['multi_stream_vs_single']:.2f} "
        f"(goal >= 0.9); smallest stream share: {result['min_stream_share']:.2f} (goal >= 0.8)"
    )
    return finish_bench(chart(args.streams), result, args.plot, args.json)
