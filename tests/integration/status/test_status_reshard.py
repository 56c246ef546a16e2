"""``kinesis-spout status`` on a split stream (kinesis-mock closes split parents): the
parent is ``closed`` while its end is not recorded and its children ``waiting``; once a
real spout drained the parent, it is ``ended`` (not probed) and the children ``open``."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kit import spout_config

from devkit.status import status_json
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.servers import KinesisMock
from kinesis_spout.testing.streams import (
    create_stream,
    emulator_client,
    make_payloads,
    put_records,
    wait_active,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PARENT = "shardId-000000000000"


def read_until(sp: KinesisSpout, done: Callable[[int], bool], timeout: float = 60.0) -> int:
    """Read and ack until ``done(records read)``; returns the count."""
    n = 0
    deadline = time.monotonic() + timeout
    while not done(n):
        assert time.monotonic() < deadline, f"read {n} records, shards {sp.shard_states()}"
        batch = sp.next_batch(100)
        sp.ack_many(batch)
        n += len(batch)
        if not batch:
            time.sleep(min(sp.poll_delay(), 0.05))
    return n


def by_shard(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["shard_id"]: s for s in doc["shards"]}


def test_states_of_a_split_stream(
    kinesis_mock: KinesisMock, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(kinesis_mock.endpoint_url)
    create_stream(client, unique_name, 1)
    first = put_records(client, unique_name, make_payloads(30, 20))
    cfg = spout_config(
        under=tmp_path,
        stream_name=unique_name,
        job_name="reshard",
        endpoint_url=kinesis_mock.endpoint_url,
        checkpoint_interval=0.1,
        shard_refresh_interval=0.5,
    )
    sp = KinesisSpout(cfg)
    sp.open()
    read_until(sp, lambda n: n >= 30)
    sp.close()

    shard = client.list_shards(StreamName=unique_name)["Shards"][0]
    lo, hi = (int(shard["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    client.split_shard(
        StreamName=unique_name, ShardToSplit=PARENT, NewStartingHashKey=str((lo + hi) // 2)
    )
    wait_active(client, unique_name)
    put_records(client, unique_name, make_payloads(20, 20, prefix="b"))
    args = (
        "--stream-name",
        unique_name,
        "--job-name",
        "reshard",
        "--endpoint-url",
        kinesis_mock.endpoint_url,
        "--checkpoint-store",
        cfg.checkpoint_store,
    )

    shards = by_shard(status_json(*args))
    children = sorted(s for s in shards if s != PARENT)
    assert len(children) == 2
    parent = shards[PARENT]
    assert parent["state"] == "closed"  # every record read, its end not recorded yet
    assert parent["checkpoint"]["sequence"] == first[-1][1]
    assert parent["lag"]["pending"] is False
    for c in children:
        assert shards[c]["state"] == "waiting" and PARENT in shards[c]["parents"]
        assert shards[c]["checkpoint"] is None
    assert sum(shards[c]["lag"]["pending"] for c in children) >= 1  # the 20 new records

    sp = KinesisSpout(cfg)
    sp.open()
    read_until(sp, lambda n: n >= 20)
    sp.close()
    doc = status_json(*args)
    shards = by_shard(doc)
    assert shards[PARENT]["state"] == "ended" and shards[PARENT]["checkpoint"]["shard_end"]
    assert shards[PARENT]["lag"] is None  # nothing left to probe
    for c in children:
        assert shards[c]["state"] == "open" and shards[c]["lag"]["pending"] is False
    assert doc["summary"]["states"] == {
        "open": 2,
        "waiting": 0,
        "closed": 0,
        "ended": 1,
        "unlisted": 0,
    }
    assert doc["kinesis_calls"] == 2 + 2 * len(children)
