"""Creating and filling streams on an emulator (tests, benchmarks, demo)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kinesis_spout.kinesis.client import make_client

PUT_BATCH = 500  # PutRecords limit


def create_stream(client: Any, name: str, shards: int = 4, timeout: float = 30.0) -> None:
    """Create a provisioned stream and wait until it is ACTIVE."""
    client.create_stream(StreamName=name, ShardCount=shards)
    wait_active(client, name, timeout)


def wait_active(client: Any, name: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        desc = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        if desc["StreamStatus"] == "ACTIVE":
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"stream {name} not ACTIVE after {timeout}s")
        time.sleep(0.05)


def wait_split(client: Any, name: str, parent: str, timeout: float = 30.0) -> None:
    """After ``split_shard`` of ``parent``: wait until both children are listed and the
    stream is ACTIVE again (writes then land in the children)."""
    deadline = time.monotonic() + timeout
    while True:
        shards = client.list_shards(StreamName=name)["Shards"]
        children = [s["ShardId"] for s in shards if s.get("ParentShardId") == parent]
        status = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"][
            "StreamStatus"
        ]
        if len(children) == 2 and status == "ACTIVE":
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"stream {name}: split of {parent} not done after {timeout}s "
                f"(children {children}, status {status})"
            )
        time.sleep(0.05)


def split_in_half(client: Any, name: str, parent: str, timeout: float = 30.0) -> None:
    """Split ``parent`` at the middle of its hash key range and wait for the children
    (:func:`wait_split`)."""
    shard = next(s for s in client.list_shards(StreamName=name)["Shards"] if s["ShardId"] == parent)
    lo = int(shard["HashKeyRange"]["StartingHashKey"])
    hi = int(shard["HashKeyRange"]["EndingHashKey"])
    client.split_shard(StreamName=name, ShardToSplit=parent, NewStartingHashKey=str((lo + hi) // 2))
    wait_split(client, name, parent, timeout)


def put_records(
    client: Any,
    name: str,
    items: Iterable[tuple[str, bytes]],
    *,
    progress: Callable[[int], None] | None = None,
) -> list[tuple[str, str]]:
    """Put ``(partition_key, data)`` items in batches of 500, retrying any
    record the emulator rejects. Returns ``(shard_id, sequence)`` per item,
    in input order."""
    out: list[tuple[str, str]] = []
    batch: list[tuple[str, bytes]] = []

    def flush() -> None:
        pending = list(range(len(batch)))
        results: list[tuple[str, str] | None] = [None] * len(batch)
        attempts = 0
        while pending:
            resp = client.put_records(
                StreamName=name,
                Records=[{"PartitionKey": batch[i][0], "Data": batch[i][1]} for i in pending],
            )
            retry = []
            for i, r in zip(pending, resp["Records"], strict=True):
                if "SequenceNumber" in r:
                    results[i] = (r["ShardId"], r["SequenceNumber"])
                else:
                    retry.append(i)
            pending = retry
            attempts += 1
            if pending:
                if attempts > 20:
                    raise RuntimeError(f"put_records: {len(pending)} records rejected 20 times")
                time.sleep(0.05 * attempts)
        out.extend(r for r in results if r is not None)
        if progress:
            progress(len(out))
        batch.clear()

    for item in items:
        batch.append(item)
        if len(batch) == PUT_BATCH:
            flush()
    if batch:
        flush()
    return out


def make_payloads(n: int, size: int = 200, prefix: str = "r") -> list[tuple[str, bytes]]:
    """``n`` records with unique ids ``<prefix><i>`` padded to ``size`` bytes."""
    out = []
    for i in range(n):
        body = f"{prefix}{i:09d}|".encode()
        out.append((f"pk-{i % 997}", body + b"x" * max(0, size - len(body))))
    return out


def kpl_aggregate(users: Iterable[tuple[str, bytes]]) -> tuple[str, bytes]:
    """``(partition key, data)`` of one KPL aggregate of ``users`` (partition key, data)
    pairs, as the Kinesis Producer Library puts it (needs ``aws-kinesis-agg``)."""
    from aws_kinesis_agg.aggregator import RecordAggregator

    agg = RecordAggregator()
    for key, data in users:
        if agg.add_user_record(key, data) is not None:
            raise ValueError("user records too large for one aggregate")
    pk, _ehk, blob = agg.clear_and_get().get_contents()
    return pk, blob


def fill_stream(client: Any, name: str, records: int, size: int = 200, shards: int = 4) -> float:
    """Create ``name`` with ``shards`` shards and put ``records`` records of ``size`` bytes
    (:func:`make_payloads`); returns the seconds the puts took (the benches print it)."""
    create_stream(client, name, shards)
    started = time.perf_counter()
    put_records(client, name, make_payloads(records, size))
    return time.perf_counter() - started


def shard_ids(client: Any, name: str) -> Sequence[str]:
    shards = client.list_shards(StreamName=name)["Shards"]
    return [s["ShardId"] for s in shards]


def emulator_client(endpoint_url: str, region: str = "us-east-1") -> Any:
    """A client for an emulator endpoint (dummy credentials when none are set)."""
    return make_client(endpoint_url, region)
