"""``reader_bench.py --consumer efo``: the spout by enhanced fan-out against polling.

Starts LocalStack in host mode (moto's server cannot serve SubscribeToShard),
fills a 4-shard stream with ``--records`` records of ``--size`` bytes, then reads
the whole stream from TRIM_HORIZON with the spout, in one run and on the same
stream, alternating:

(a) ``consumer = "polling"``: GetRecords, 10,000 per call, 5 calls/s per shard;
(b) ``consumer = "efo"``: one SubscribeToShard subscription per shard (the consumer
    is registered once, before the first round).

Each reads and acks every record (memory checkpoint store). For each: records/s
(wall clock, from ``open`` to the last ack) and client CPU microseconds per
record (this process, every thread: the subscription threads parse the events;
LocalStack and its engine are other processes). ``efo_vs_polling`` is (b)'s
records/s over (a)'s. Emulators do not model Kinesis' quotas (2 MB/s per shard
shared by the polling consumers, 2 MB/s per consumer with enhanced fan-out), so
the point of the ratio is the client's cost, not the service's speed-up.
"""

from __future__ import annotations

import gc
import logging
import statistics
import time
from dataclasses import dataclass
from typing import Any

from devkit.localstack import LocalStackServer
from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.config import SpoutConfig
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.kinesis.consumer import ensure_consumer
from kinesis_spout.kinesis.efo_api import FanOutApi
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.streams import fill_stream

SHARDS = 4
LIMIT = 10_000
TIMEOUT = 600.0
CONSUMERS = ("polling", "efo")


@dataclass(frozen=True, slots=True)
class Run:
    """One timed read (also reader_bench's runs): what read, how many records, wall and
    CPU seconds of this process."""

    name: str
    records: int
    seconds: float
    cpu_seconds: float
    subscriptions: int = 0

    @property
    def rps(self) -> float:
        return self.records / self.seconds

    @property
    def cpu_us(self) -> float:
        return 1e6 * self.cpu_seconds / self.records


def read_all(endpoint: str, stream: str, expected: int, consumer: str) -> Run:
    """The spout reads and acks the whole stream; wall and CPU time from open to the end
    (also the spout reader of ``reader_bench.py``)."""
    cfg = SpoutConfig(
        stream_name=stream,
        endpoint_url=endpoint,
        job_name="bench",
        consumer=consumer,
        checkpoint_store="memory://",
        dead_letter="none",
        records_per_call=LIMIT,
        checkpoint_interval=5.0,
    )
    spout = KinesisSpout(cfg, store=MemoryCheckpointStore("bench"), client=make_client(endpoint))
    wall, cpu = time.perf_counter(), time.process_time()
    spout.open()
    count = 0
    deadline = time.monotonic() + TIMEOUT
    try:
        while count < expected:
            batch = spout.next_batch(LIMIT)
            if batch:
                spout.ack_many(batch)
                count += len(batch)
            else:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{consumer}: read {count} of {expected}")
                time.sleep(spout.poll_delay())
        seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
        subs = sum(
            getattr(sh.reader.getter, "pump", None).subscriptions  # type: ignore[union-attr]
            for sh in spout.streams.partitions()  # a figure of the run
            if sh.reader is not None and hasattr(sh.reader.getter, "pump")
        )
    finally:
        spout.close()
    return Run(consumer, count, seconds, cpu_seconds, subs)


def run_efo(records: int, size: int, rounds: int) -> dict[str, Any]:
    """Both consumers, ``rounds`` times each on the same stream; the figures (medians)."""
    logging.getLogger("kinesis_spout").setLevel(logging.WARNING)
    with LocalStackServer() as ls:
        client = make_client(ls.endpoint_url, read_timeout=120)
        stream = "reader-bench-efo"
        put_seconds = fill_stream(client, stream, records, size, SHARDS)
        print(
            f"LocalStack {ls.endpoint_url}: {records} records of {size} B on {SHARDS} shards "
            f"written in {put_seconds:.1f}s",
            flush=True,
        )
        ensure_consumer(FanOutApi(KinesisApi(client, stream)), "bench")
        runs: dict[str, list[Run]] = {c: [] for c in CONSUMERS}
        for rnd in range(rounds):
            for consumer in CONSUMERS:
                gc.collect()  # the last run's garbage is not this run's cost
                run = read_all(ls.endpoint_url, stream, records, consumer)
                runs[consumer].append(run)
                print(
                    f"round {rnd + 1} {consumer:>8}: {run.rps:9.0f} records/s  "
                    f"{run.cpu_us:6.1f} us CPU/record  ({run.seconds:.2f}s"
                    f"{f', {run.subscriptions} subscriptions' if run.subscriptions else ''})",
                    flush=True,
                )

    def med(consumer: str, attr: str) -> float:
        return float(statistics.median(getattr(r, attr) for r in runs[consumer]))

    figures: dict[str, Any] = {
        "emulator": "localstack-4.9.2-host",
        "records": records,
        "record_bytes": size,
        "shards": SHARDS,
        "rounds": rounds,
    }
    for consumer in CONSUMERS:
        figures[f"{consumer}_rps"] = round(med(consumer, "rps"), 1)
        figures[f"{consumer}_cpu_us_per_record"] = round(med(consumer, "cpu_us"), 2)
    figures["efo_vs_polling"] = round(figures["efo_rps"] / figures["polling_rps"], 3)
    figures["efo_cpu_vs_polling"] = round(
        figures["efo_cpu_us_per_record"] / figures["polling_cpu_us_per_record"], 3
    )
    print()
    print(
        f"efo {figures['efo_rps']:.0f} records/s, {figures['efo_cpu_us_per_record']:.1f} us CPU/"
        f"record; polling {figures['polling_rps']:.0f} records/s, "
        f"{figures['polling_cpu_us_per_record']:.1f} us CPU/record; efo / polling: "
        f"{figures['efo_vs_polling']:.2f}x records/s, {figures['efo_cpu_vs_polling']:.2f}x CPU "
        "per record (goal <= 1.0)"
    )
    return figures
