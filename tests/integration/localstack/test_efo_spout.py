"""Enhanced fan-out (``consumer = "efo"``) in the spout, against LocalStack in host mode.

LocalStack implements SubscribeToShard itself over its Kinesis engine: it polls
GetRecords for the subscription, sends an event at once when records came and
after 3 s when none did, never sends ChildShards and ends a subscription after
300 s (``localstack/README.md``). moto's server does not implement it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator
from kit import spout_config

from devkit.faultproxy import FaultProxy
from devkit.localstack import LocalStackServer
from kinesis_spout.checkpoint import open_store
from kinesis_spout.config import SpoutConfig
from kinesis_spout.errors import KinesisError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.consumer import ensure_consumer
from kinesis_spout.kinesis.efo_api import FanOutApi
from kinesis_spout.kinesis.efo_getter import EfoShardGetter
from kinesis_spout.records import Record
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import (
    create_stream,
    emulator_client,
    make_payloads,
    put_records,
    wait_active,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def efo_config(endpoint: str, stream: str, tmp_path: Path, **overrides: Any) -> SpoutConfig:
    values: dict[str, Any] = {
        "stream_name": stream,
        "job_name": stream,
        "endpoint_url": endpoint,
        "consumer": "efo",
        "checkpoint_interval": 0.3,
        "throttle_backoff": 0.05,
        "throttle_backoff_max": 0.5,
        "shard_refresh_interval": 1.0,
    }
    return spout_config(under=tmp_path, **{**values, **overrides})


def read_until(
    spout: KinesisSpout,
    done: Callable[[list[Record]], bool],
    *,
    ack: bool = True,
    timeout: float = 60.0,
    into: list[Record] | None = None,
) -> list[Record]:
    """Read (and ack) until ``done(records so far)``; fails after ``timeout``."""
    got: list[Record] = [] if into is None else into
    deadline = time.monotonic() + timeout
    while not done(got):
        per_shard = Counter(r.shard_id for r in got)
        assert time.monotonic() < deadline, f"read {len(got)} records: {per_shard}"
        batch = spout.next_batch(1000)
        if batch:
            got += batch
            if ack:
                spout.ack_many(batch)
        else:
            time.sleep(min(spout.poll_delay(), 0.05))
    return got


def efo_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("kinesis-efo-")]


def stored(cfg: SpoutConfig) -> dict[str, tuple[str | None, int, bool]]:
    store = open_store(cfg.checkpoint_store, cfg.job_name)
    try:
        return {
            s: (cp.sequence_number, cp.sub_sequence_number, cp.shard_end)
            for s, cp in store.load(cfg.stream_name).items()
        }
    finally:
        store.close()


def consumers(client: Any, stream: str) -> list[str]:
    arn = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    return [c["ConsumerName"] for c in client.list_stream_consumers(StreamARN=arn)["Consumers"]]


def test_registers_reads_every_record_once_and_deregisters(
    localstack: LocalStackServer, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(localstack.endpoint_url)
    create_stream(client, unique_name, 2)
    agg = RecordAggregator()
    users = [f"user-{i:02d}" for i in range(12)]
    for u in users:
        assert agg.add_user_record(u, f"{u}|kpl".encode()) is None
    pk, _ehk, blob = agg.clear_and_get().get_contents()
    put = put_records(client, unique_name, make_payloads(300, 120) + [(pk, blob)])
    # Two readers registering the same consumer at once: one registers, the other finds it.
    fanout = FanOutApi(KinesisApi(client, unique_name))
    with ThreadPoolExecutor(2) as pool:
        found = list(pool.map(lambda _: ensure_consumer(fanout, "racing"), range(2)))
    assert found[0].arn == found[1].arn and {c.status for c in found} == {"ACTIVE"}

    cfg = efo_config(localstack.endpoint_url, unique_name, tmp_path, deregister_on_close=True)
    assert unique_name not in consumers(client, unique_name)
    spout = KinesisSpout(cfg)
    spout.open()
    assert unique_name in consumers(client, unique_name)  # registered, ACTIVE
    got = read_until(spout, lambda g: len(g) >= 312)
    read_until(spout, lambda g: spout.is_idle, into=[])
    assert efo_threads()  # one subscription thread per shard
    spout.close()

    assert efo_threads() == []  # nothing left running
    assert sorted(consumers(client, unique_name)) == ["racing"]  # ours deregistered
    keys = Counter((r.shard_id, r.sequence_number, r.sub_sequence_number) for r in got)
    assert all(n == 1 for n in keys.values()) and len(keys) == 312
    kpl = [r for r in got if r.sequence_number == put[-1][1]]
    assert [r.partition_key for r in kpl] == users  # de-aggregated, in order
    assert [r.sub_sequence_number for r in kpl] == list(range(12))
    last: dict[str, int] = {}
    for shard, seq in put:
        last[shard] = max(last.get(shard, 0), int(seq))
    cps = stored(cfg)
    for shard, seq in last.items():
        assert int(cps[shard][0] or 0) == seq  # checkpoints at each shard's last record


def test_renewal_and_a_cut_connection_resume_after_the_last_record(
    localstack: LocalStackServer, unique_name: str, tmp_path: Path
) -> None:
    """Subscriptions renewed every second and one cut mid-subscription by the fault
    proxy: each new subscription starts after the last record received, nothing is
    lost, skipped or read twice."""
    client = emulator_client(localstack.endpoint_url)
    create_stream(client, unique_name, 1)
    shard = "shardId-000000000000"
    with FaultProxy(localstack.endpoint_url) as proxy:
        cfg = efo_config(proxy.endpoint_url, unique_name, tmp_path, subscription_renewal=1.0)
        spout = KinesisSpout(cfg)
        spout.open()
        put: list[tuple[str, str]] = []
        got: list[Record] = []
        subscribed = 0

        def renewed(at_least: int) -> Callable[[list[Record]], bool]:
            return lambda g: len(proxy.bodies("SubscribeToShard")) >= at_least

        for rnd in range(4):
            put += put_records(client, unique_name, make_payloads(40, 80, prefix=f"r{rnd}-"))
            wanted = len(put)
            read_until(spout, lambda g, n=wanted: len(g) >= n, into=got)  # type: ignore[misc]
            if rnd == 0:  # a renewal (each second) before the next round, however fast it is
                read_until(spout, renewed(2), into=got)
            if rnd == 1:
                subscribed = len(proxy.bodies("SubscribeToShard"))
                cut_live_stream(proxy)  # the connection drops mid-subscription
                last_before_cut = got[-1].sequence_number
            if rnd == 3:  # the reconnect, and a renewal after it
                read_until(spout, renewed(subscribed + 2), into=got)
        spout.close()
        bodies = proxy.bodies("SubscribeToShard")

    assert [(r.shard_id, r.sequence_number) for r in got] == put  # in order, once each
    starts = [b["StartingPosition"] for b in bodies]
    assert starts[0] == {"Type": "TRIM_HORIZON"}
    assert len(starts) >= 4  # renewals and the reconnect
    after_cut = starts[subscribed]
    assert after_cut == {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": last_before_cut}
    seqs = {r.sequence_number for r in got}
    for start in starts[1:]:  # every renewal resumes after a record this reader received
        assert start["Type"] == "AFTER_SEQUENCE_NUMBER" and start["SequenceNumber"] in seqs
    assert all(b["ShardId"] == shard for b in bodies)


def cut_live_stream(proxy: FaultProxy, timeout: float = 30.0) -> None:
    """Cut the open event stream (waiting out a renewal that has none open just now)."""
    deadline = time.monotonic() + timeout
    while not proxy.cut_streams():
        assert time.monotonic() < deadline, "no subscription open to cut"
        time.sleep(0.02)


def test_a_full_window_pauses_the_subscription(
    localstack: LocalStackServer, unique_name: str, tmp_path: Path
) -> None:
    """While the shard's replay window is full the subscription thread stops taking
    events (at most ``capacity`` wait in its buffer), though records keep coming; once
    the window is saved it reads on and nothing is lost."""
    client = emulator_client(localstack.endpoint_url)
    create_stream(client, unique_name, 1)
    cfg = efo_config(localstack.endpoint_url, unique_name, tmp_path, max_in_flight=30)
    spout = KinesisSpout(cfg)
    spout.open()
    put = put_records(client, unique_name, make_payloads(40, 80, prefix="a"))
    held = read_until(spout, lambda g: len(g) >= 30, ack=False)
    assert len(held) == 30  # the window is full: nothing more is handed out
    shards = spout.streams.sets[unique_name].shards
    getter = shards["shardId-000000000000"].reader.getter  # type: ignore[union-attr]
    assert isinstance(getter, EfoShardGetter)
    pump = getter.pump
    deadline = time.monotonic() + 90
    rnd = 0
    while len(pump) < pump.capacity:  # records keep coming; LocalStack pushes them in events
        assert time.monotonic() < deadline, f"{len(pump)} events buffered"
        put += put_records(client, unique_name, make_payloads(15, 80, prefix=f"b{rnd}-"))
        rnd += 1
        time.sleep(1.0)
        assert spout.next_batch(100) == []  # the window is still full
    paused_events = pump.events
    for more in range(4):  # more records while paused: the thread reads none of them
        put += put_records(client, unique_name, make_payloads(15, 80, prefix=f"c{more}-"))
        time.sleep(1.0)
    assert pump.events == paused_events and len(pump) == pump.capacity
    assert pump.received < len(put)  # not everything written was pulled in
    spout.ack_many(held)
    got = held + read_until(spout, lambda g: len(held) + len(g) >= len(put))
    spout.close()
    assert sorted((r.shard_id, r.sequence_number) for r in got) == sorted(put)
    assert len(got) == len(put)
    assert pump.events > paused_events


def test_a_split_shard_is_drained_before_its_children(
    localstack: LocalStackServer, unique_name: str, tmp_path: Path
) -> None:
    """LocalStack sends no ChildShards: the subscription of the closed parent ends early
    and a GetRecords probe finds the end and the children; they start after it."""
    client = emulator_client(localstack.endpoint_url)
    create_stream(client, unique_name, 1)
    parent = "shardId-000000000000"
    cfg = efo_config(localstack.endpoint_url, unique_name, tmp_path)
    spout = KinesisSpout(cfg)
    spout.open()
    before = put_records(client, unique_name, make_payloads(60, 80, prefix="a"))
    order: list[Record] = read_until(spout, lambda g: len(g) >= 60)
    shard = client.list_shards(StreamName=unique_name)["Shards"][0]
    lo, hi = (int(shard["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    client.split_shard(
        StreamName=unique_name, ShardToSplit=parent, NewStartingHashKey=str((lo + hi) // 2)
    )
    wait_active(client, unique_name)
    after = put_records(client, unique_name, make_payloads(60, 80, prefix="b"))
    read_until(spout, lambda g: len(g) >= 120, into=order)
    states = spout.shard_states()
    spout.close()

    assert Counter((r.shard_id, r.sequence_number) for r in order) == Counter(before + after)
    assert {s for s, _ in after} == {"shardId-000000000001", "shardId-000000000002"}
    assert states[parent].value == "ended"
    assert stored(cfg)[parent][2] is True  # shard_end saved before the children started
    assert efo_threads() == []


def test_efo_against_moto_is_a_clear_error(
    moto_server: MotoServer, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(moto_server.endpoint_url)
    create_stream(client, unique_name, 1)
    cfg = efo_config(
        moto_server.endpoint_url,
        unique_name,
        tmp_path,
        throttle_backoff=0.01,
        throttle_backoff_max=0.02,
    )
    spout = KinesisSpout(cfg)
    spout.open()  # moto registers consumers; it cannot serve SubscribeToShard
    with pytest.raises(KinesisError, match="support enhanced fan-out.*polling"):
        read_until(spout, lambda g: False, timeout=30)
    spout.close()
    assert efo_threads() == []


def test_two_streams_one_by_enhanced_fan_out_one_polled(
    localstack: LocalStackServer, unique_name: str, tmp_path: Path
) -> None:
    """Issue 24: a per-stream ``consumer``: one stream subscribed (its consumer registered
    on it), the other polled, in one reader; each record read once, with its stream."""

    client = emulator_client(localstack.endpoint_url)
    pushed, polled = f"{unique_name}-efo", f"{unique_name}-poll"
    sent: dict[str, set[tuple[str, str]]] = {}
    for name in (pushed, polled):
        create_stream(client, name, 2)
        sent[name] = set(put_records(client, name, make_payloads(80, 60)))
    cfg = efo_config(
        localstack.endpoint_url,
        pushed,
        tmp_path,
        consumer="polling",
        consumer_name="multi",
        streams=[{"stream": pushed, "consumer": "efo"}, polled],
    )
    with KinesisSpout(cfg) as spout:
        got = read_until(spout, lambda g: len(g) >= 160)  # type: ignore[arg-type]
        assert efo_threads()  # the efo stream's shards are subscribed
        assert consumers(client, pushed) == ["multi"] and consumers(client, polled) == []
    keys = Counter((r.stream, r.shard_id, r.sequence_number) for r in got)
    assert len(keys) == 160 and set(keys.values()) == {1}
    for name in (pushed, polled):
        assert {(s, q) for st, s, q in keys if st == name} == sent[name]
