"""Hole 6: LATEST (and AT_TIMESTAMP) start positions are pinned durably at first open.

* A job that starts at LATEST and crashes before its first checkpoint used to
  start at LATEST again on restart: records that arrived in between were never
  read.  The position LATEST resolved to is now saved in the store before any
  record is handed out, and a restart resumes from it.
* At the first open of a recently resharded stream, the open children of a
  closed parent used to be read from TRIM_HORIZON: everything written to them
  since the reshard, although the job was asked to start at LATEST.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from reader_helpers import ids, put, read_all, spout
from test_reshard import hash_middle

from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.config import InitialPosition
from kinesis_spout.testing.servers import KinesisEmulator, KinesisMock
from kinesis_spout.testing.streams import create_stream, emulator_client, wait_active

pytestmark = pytest.mark.integration

# The pinned time is the server's Date header (whole seconds) minus a one-second
# margin: records written this long before the open are certainly before it.
BEFORE_OPEN = 2.5


def test_a_crash_before_the_first_checkpoint_skips_nothing_written_since_the_start(
    emulator: KinesisEmulator, emulator_kinesis: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(emulator_kinesis, unique_name, 2)
    put(emulator_kinesis, unique_name, 20, prefix="old")
    time.sleep(BEFORE_OPEN)
    store = MemoryCheckpointStore("job")
    first = spout(
        emulator.endpoint_url,
        unique_name,
        tmp_path,
        store,
        initial_position=InitialPosition.LATEST,
    )
    pinned = store.load(unique_name)
    assert len(pinned) == 2 and all(cp.start_at is not None for cp in pinned.values())
    new = put(emulator_kinesis, unique_name, 30, prefix="new")
    # kill -9: the first job never checkpoints and never closes.
    del first
    second = spout(
        emulator.endpoint_url,
        unique_name,
        tmp_path,
        store,
        initial_position=InitialPosition.LATEST,
    )
    got = read_all(second, stop=lambda: second.stats().read >= 30 and second.is_idle)
    second.close()
    assert sorted(ids(got)) == sorted(new)


def test_latest_at_the_first_open_of_a_resharded_stream_skips_the_childrens_past(
    kinesis_mock: KinesisMock, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(kinesis_mock.endpoint_url)
    create_stream(client, unique_name, 1)
    parent = "shardId-000000000000"
    client.split_shard(
        StreamName=unique_name,
        ShardToSplit=parent,
        NewStartingHashKey=hash_middle(client, unique_name, parent),
    )
    wait_active(client, unique_name)
    put(client, unique_name, 40, prefix="past")  # lands in the children
    time.sleep(BEFORE_OPEN)
    store = MemoryCheckpointStore("job")
    sp = spout(
        kinesis_mock.endpoint_url,
        unique_name,
        tmp_path,
        store,
        initial_position=InitialPosition.LATEST,
    )
    new = put(client, unique_name, 30, prefix="new")
    got = read_all(sp, stop=lambda: sp.stats().read >= 30 and sp.is_idle)
    sp.close()
    assert sorted(ids(got)) == sorted(new)
