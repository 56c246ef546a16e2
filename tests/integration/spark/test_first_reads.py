"""The job's reader opens each polled shard's iterator as it opens (the job opens it while
its Spark session starts), so a shard's first read task goes straight to GetRecords; an
iterator Kinesis refuses then is left to that read, which meets the refusal as before.

The planner and the read tasks are driven in-process (no Spark), on real emulators.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from read_helpers import reader, run_tasks

from devkit.faultproxy import FaultProxy
from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.errors import InvalidPositionError
from kinesis_spout.records import Checkpoint
from kinesis_spout.testing.servers import KinesisMock, MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client, put_records

pytestmark = pytest.mark.integration

SHARDS = 4
RECORDS = 40


def fill(client: Any, stream: str) -> list[str]:
    """A stream of :data:`SHARDS` shards holding :data:`RECORDS` records; their ids."""
    create_stream(client, stream, SHARDS)
    ids = [f"r{i}" for i in range(RECORDS)]
    put_records(client, stream, [(f"k{i}", f"{rid}|x".encode()) for i, rid in enumerate(ids)])
    return ids


def test_each_shard_is_opened_by_the_reader_and_first_read_with_one_getrecords(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    ids = fill(moto_client, unique_name)
    with FaultProxy(moto_server.endpoint_url) as px:
        sp = reader(px.endpoint_url, unique_name, tmp_path, MemoryCheckpointStore("job"))
        assert px.requests.get("GetShardIterator", 0) == SHARDS
        plans = sp.plan(10_000)
        assert len(plans) == SHARDS
        assert all(p.position is not None and p.position.iterator for p in plans)
        px.reset_counts()
        read = run_tasks(sp, want=RECORDS)
        assert sorted(rid for task in read for rid in task) == sorted(ids)
        assert px.requests.get("GetShardIterator", 0) == 0
        assert px.requests.get("GetRecords", 0) == SHARDS
        sp.spout.close()


def test_an_iterator_the_reader_could_not_open_is_opened_by_the_first_read(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    ids = fill(moto_client, unique_name)
    with FaultProxy(moto_server.endpoint_url, operations=["GetShardIterator"]) as px:
        px.throttle = 1.0  # every GetShardIterator of the open is throttled
        sp = reader(px.endpoint_url, unique_name, tmp_path, MemoryCheckpointStore("job"))
        assert px.injected.throttle == SHARDS
        assert all(p.position is not None and p.position.iterator is None for p in sp.plan(10_000))
        px.throttle = 0.0
        px.reset_counts()
        read = run_tasks(sp, want=RECORDS)
        assert sorted(rid for task in read for rid in task) == sorted(ids)
        assert px.requests.get("GetShardIterator", 0) == SHARDS
        sp.spout.close()


def test_a_checkpoint_kinesis_refuses_still_fails_the_job_at_its_first_read(
    kinesis_mock: KinesisMock, unique_name: str, tmp_path: Path
) -> None:
    fill(emulator_client(kinesis_mock.endpoint_url), unique_name)
    store = MemoryCheckpointStore("job")
    bogus = "49680421444009340628450472579903289879801386361247760386"
    store.save(Checkpoint(unique_name, "shardId-000000000000", bogus, 0))
    sp = reader(kinesis_mock.endpoint_url, unique_name, tmp_path, store)  # opens
    with pytest.raises(InvalidPositionError, match=f"shardId-000000000000: .*{bogus}"):
        run_tasks(sp, want=RECORDS)
    sp.spout.close()
