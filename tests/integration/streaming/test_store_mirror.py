"""The streaming source's commits, mirrored into the checkpoint store, resume a spout
exactly where the query was, also inside a KPL aggregate (issue 25, hole 8).

The store has no partial flag: ``(seq, sub)`` with ``sub > 0`` means "resume inside
aggregate ``seq`` after ``sub``", while ``(seq, 0)`` means "record ``seq`` is done". So
a partial position after the first user record of an aggregate cannot be written as it
is; a partial position after a later user record can.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kit import spout_config
from streaming_helpers import Row, fill, rid

from kinesis_spout.checkpoint import open_store
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.records import ShardPosition, StartPosition
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.streaming.offsets import SourceOffset
from kinesis_spout.streaming.options import parse_options
from kinesis_spout.streaming.store_mirror import StoreMirror
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"


def _stream(client: Any, name: str) -> list[Row]:
    """One shard: a plain record, two aggregates of 4 user records, a plain record."""
    create_stream(client, name, 1)
    rows = fill(client, name, 1, "p", aggregates=2, per_aggregate=4)
    return rows + fill(client, name, 1, "z")


def _mirror(endpoint: str, stream: str, store: str, *positions: ShardPosition) -> None:
    """Commit ``positions`` one after the other, as the source's commits do."""
    opts = parse_options(
        {"streamname": stream, "endpointurl": endpoint, "checkpointstore": store}, env={}
    )
    mirror = StoreMirror(opts)
    try:
        for p in positions:
            mirror.commit(SourceOffset(stream, StartPosition(), {SHARD: p}))
    finally:
        mirror.close()


def _resume(endpoint: str, stream: str, store_url: str, tmp_path: Path, n: int) -> list[str]:
    """What a spout resuming from the store delivers (``n`` records at most)."""
    config = spout_config(
        under=tmp_path,
        stream_name=stream,
        endpoint_url=endpoint,
        job_name=f"spark-{stream}",
        checkpoint_store=store_url,
        worker_id="w1",
    )
    store = open_store(store_url, config.job_name, owner="w1")
    spout = KinesisSpout(config, store=store, client=make_client(endpoint))
    spout.open()
    got: list[str] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and not (spout.is_idle and len(got) >= n):
            batch = spout.next_batch(100)
            got.extend(rid(r.data) for r in batch)
            spout.ack_many(batch)
            if not batch:
                time.sleep(min(spout.poll_delay(), 0.05))
    finally:
        spout.close()
    return got


def _pos(row: Row, partial: bool) -> ShardPosition:
    return ShardPosition(str(row.seq), row.sub, partial=partial, count=1)


def test_a_cut_after_an_aggregates_first_record_is_not_mirrored_as_done(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    rows = _stream(moto_client, unique_name)
    store = f"file://{tmp_path / 'store'}"
    # batch 1 read the plain record; batch 2 stopped after the first user record of A
    _mirror(moto_server.endpoint_url, unique_name, store, _pos(rows[0], False), _pos(rows[1], True))
    got = _resume(moto_server.endpoint_url, unique_name, store, tmp_path, len(rows) - 1)
    # the previous position stays: the spout replays A's first record, and skips nothing
    assert got == [r.rid for r in rows[1:]]


def test_a_cut_later_inside_an_aggregate_resumes_right_after_it(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """The issue's claim does not hold for a cut after a later user record: the store's
    ``(seq, sub > 0)`` already means "resume inside the aggregate"."""
    rows = _stream(moto_client, unique_name)
    store = f"file://{tmp_path / 'store'}"
    _mirror(moto_server.endpoint_url, unique_name, store, _pos(rows[6], True))  # B's 2nd
    got = _resume(moto_server.endpoint_url, unique_name, store, tmp_path, 3)
    assert got == [r.rid for r in rows[7:]]  # B's 3rd and 4th, then the plain record
