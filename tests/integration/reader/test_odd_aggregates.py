"""Hole 3 on both emulators: empty and corrupt KPL aggregates never stall a shard."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from reader_helpers import read_all, spout

from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.kinesis.aggregation import MAGIC
from kinesis_spout.metrics import InMemoryMetrics
from kinesis_spout.testing.servers import KinesisEmulator
from kinesis_spout.testing.streams import create_stream, put_records

pytestmark = pytest.mark.integration

EMPTY = MAGIC + hashlib.md5(b"").digest()
CORRUPT = MAGIC + b"\x1a\x05\x08" + b"\x00" * 16  # bad checksum


def test_empty_and_corrupt_aggregates_are_counted_and_the_shard_moves_on(
    emulator: KinesisEmulator, emulator_kinesis: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(emulator_kinesis, unique_name, 1)
    put_records(emulator_kinesis, unique_name, [("a", b"one"), ("e", EMPTY), ("c", CORRUPT)])
    put_records(emulator_kinesis, unique_name, [("b", b"two"), ("e", EMPTY)])
    metrics = InMemoryMetrics()
    store = MemoryCheckpointStore("job")
    sp = spout(emulator.endpoint_url, unique_name, tmp_path, store, metrics=metrics)
    got = read_all(sp)
    sp.close()
    assert [r.data for r in got] == [b"one", CORRUPT, b"two"]
    assert metrics.count("empty_aggregates_skipped") == 2
    assert metrics.count("corrupt_aggregates") == 1
    # The trailing empty aggregate counts as done: a restart reads nothing again.
    again = spout(emulator.endpoint_url, unique_name, tmp_path, store)
    assert read_all(again) == []
    again.close()
    cp = store.load(unique_name)["shardId-000000000000"]
    assert cp.key is not None and cp.key > got[-1].key
