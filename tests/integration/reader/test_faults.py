"""Throttling, 5xx, dropped connections and expired iterators from the fault proxy:
nothing lost, nothing duplicated beyond the failures the consumer asked for."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from reader_helpers import drive, fill, ids, rid, spout

from devkit.faultproxy import FaultProxy
from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.metrics import InMemoryMetrics
from kinesis_spout.records import Record
from kinesis_spout.testing.servers import KinesisEmulator

pytestmark = pytest.mark.integration


def test_every_fault_kind_loses_and_duplicates_nothing(
    emulator: KinesisEmulator, emulator_kinesis: Any, unique_name: str, tmp_path: Path
) -> None:
    written = fill(emulator_kinesis, unique_name, 2000, shards=4)
    metrics = InMemoryMetrics()
    store = MemoryCheckpointStore("job")
    rng = random.Random(5)
    deliveries: Counter[str] = Counter()
    failed = 0
    with FaultProxy(emulator.endpoint_url, seed=5) as proxy:
        sp = spout(
            proxy.endpoint_url,
            unique_name,
            tmp_path,
            store,
            metrics=metrics,
            records_per_call=25,  # many calls, so every fault kind shows up
            max_calls_per_second=50,
        )
        proxy.set_rates(throttle=0.1, error=0.1, drop=0.1, expire=0.1)

        def handle(batch: list[Record]) -> None:
            nonlocal failed
            for r in batch:
                deliveries[rid(r.data)] += 1
                if r.attempt == 1 and rng.random() < 0.05:
                    sp.fail(r, "consumer says no")
                    failed += 1
                else:
                    sp.ack(r)

        drive(sp, handle, timeout=120)
        proxy.clear_faults()
        sp.close()
        injected = proxy.injected
    assert set(deliveries) == set(written)
    # The only repeats are the retries of records the consumer failed.
    assert sum(deliveries.values()) == len(written) + failed
    assert injected.throttle and injected.error and injected.expire
    assert injected.drop_before and injected.drop_after
    assert metrics.count("kinesis_throttled") >= 1
    assert metrics.count("kinesis_errors") >= 1
    assert metrics.count("iterators_expired") >= 1
    last_keys = {}
    for s, cp in store.load(unique_name).items():
        last_keys[s] = cp.key
    assert len(last_keys) == 4


def test_endpoint_down_mid_read_backs_off_and_resumes(
    moto_server: KinesisEmulator, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    written = fill(moto_client, unique_name, 600, shards=2)
    proxy = FaultProxy(moto_server.endpoint_url).start()
    port = proxy.port
    metrics = InMemoryMetrics()
    sp = spout(proxy.endpoint_url, unique_name, tmp_path, metrics=metrics, records_per_call=50)
    got: list[Record] = []

    def handle(batch: list[Record]) -> None:
        got.extend(batch)
        sp.ack_many(batch)

    drive(sp, handle, stop=lambda: len(got) >= 200, batch=100)
    proxy.close()  # connection refused from now on
    drive(sp, handle, stop=lambda: metrics.count("kinesis_errors") >= 4, batch=100)
    assert sp.poll_delay() > 0  # backing off, not spinning
    with FaultProxy(moto_server.endpoint_url, port=port):
        drive(sp, handle)
    sp.close()
    assert Counter(ids(got)) == Counter(written)
