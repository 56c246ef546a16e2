"""A replay window that fills at the first user record of a KPL aggregate.

The checkpoint cannot be saved at ``(seq, 0)`` of a multi-record aggregate (a
resume from there would skip the rest of it), so the window cannot shrink by a
save: the rest of that aggregate must still be let in, or the shard stalls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from reader_helpers import read_all, rid, spout

from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.testing.servers import KinesisEmulator
from kinesis_spout.testing.streams import create_stream, kpl_aggregate, put_records

pytestmark = pytest.mark.integration


def aggregate(prefix: str, n: int) -> tuple[str, bytes]:
    return kpl_aggregate((f"{prefix}-{u}", f"{prefix}{u}|x".encode()) for u in range(n))


@pytest.mark.parametrize("max_in_flight", [4, 1])
def test_a_window_full_at_the_head_of_an_aggregate_lets_the_rest_of_it_in(
    emulator: KinesisEmulator,
    emulator_kinesis: Any,
    unique_name: str,
    tmp_path: Path,
    max_in_flight: int,
) -> None:
    create_stream(emulator_kinesis, unique_name, 1)
    plain = [(f"p{i}", f"p{i}|x".encode()) for i in range(3)]
    put_records(emulator_kinesis, unique_name, [*plain, aggregate("a", 4), ("q", b"q0|x")])
    expected = ["p0", "p1", "p2", "a0", "a1", "a2", "a3", "q0"]
    store = MemoryCheckpointStore("job")
    sp = spout(emulator.endpoint_url, unique_name, tmp_path, store, max_in_flight=max_in_flight)
    got = read_all(sp, timeout=20.0)
    assert [rid(r.data) for r in got] == expected
    sp.close()
    cp = store.load(unique_name)["shardId-000000000000"]
    assert cp.key == got[-1].key
    # A restart reads nothing again, and nothing was skipped.
    again = spout(emulator.endpoint_url, unique_name, tmp_path, store, max_in_flight=max_in_flight)
    assert read_all(again, timeout=10.0) == []
    again.close()
