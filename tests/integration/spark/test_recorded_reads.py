"""A read task of the DataFrame styles hands on each shard's records as soon as that
shard's read ends and its end is recorded, while its other shards are read
(:func:`~kinesis_spout.spark.read.recorded.read_recorded`), on a real emulator.

The task's reads are driven in-process (no Spark): what is tested is when each plan's
records come out of the read, against what the batch-end store and the emulator saw.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from devkit.faultproxy import FaultProxy
from kinesis_spout.config import InitialPosition
from kinesis_spout.records import GetterPosition
from kinesis_spout.spark.plan import ReadPlan, ReadSettings
from kinesis_spout.spark.read.recorded import RecordTo, read_recorded
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, put_records

pytestmark = pytest.mark.integration

START = GetterPosition(None, None, True, InitialPosition.TRIM_HORIZON, None)


def wait_for_calls(px: FaultProxy, n: int, seconds: float = 30.0) -> None:
    """Until the emulator was asked ``n`` GetRecords calls (a deadline of ``seconds``)."""
    deadline = time.monotonic() + seconds
    while px.requests.get("GetRecords", 0) < n:
        assert time.monotonic() < deadline, f"fewer than {n} GetRecords calls in {seconds} s"
        time.sleep(0.01)


@pytest.mark.parametrize("shards", [2, 3])
def test_a_task_hands_on_a_shards_records_while_it_reads_its_next_shard(
    moto_server: MotoServer,
    moto_client: Any,
    job_config: Any,
    unique_name: str,
    tmp_path: Path,
    shards: int,
) -> None:
    """One task of several shards, one call at a time (``poll_threads`` 1): the first
    plan's records come out as soon as its read ends, with its end recorded, while the
    next shard's call is already sent and no other plan's records are taken or its end
    recorded; the others follow one by one, each recorded before its records come out.
    Every shard's records come out once, in order, whole."""
    create_stream(moto_client, unique_name, shards)
    put = put_records(moto_client, unique_name, [(f"k{i}", b"r%d" % i) for i in range(90)])
    want: dict[str, list[str]] = {}
    for shard, seq in put:
        want.setdefault(shard, []).append(seq)
    assert len(want) == shards
    with FaultProxy(moto_server.endpoint_url) as px:
        cfg = job_config(endpoint_url=px.endpoint_url, poll_threads=1)
        settings = replace(ReadSettings.of(cfg), read_seconds=60.0)
        plans = [ReadPlan(i, unique_name, s, START, limit=500) for i, s in enumerate(sorted(want))]
        to = RecordTo(cfg.checkpoint_store, cfg.job_name, unique_name, "run1", 1)
        ends = to.open()
        try:
            got: dict[str, list[str]] = {}
            for n, (res, records) in enumerate(read_recorded(plans, settings, to), 1):
                recorded = [s for s in want if ends.get("run1", 1, s) is not None]
                assert res.shard_id in recorded and len(recorded) == n  # only those out
                end = ends.get("run1", 1, res.shard_id)
                assert end is not None and end.count == len(records) == len(res)
                if n < shards:  # the next shard's call went out before these came
                    wait_for_calls(px, n + 1)
                got[res.shard_id] = [r.sequence_number for r in records]
        finally:
            ends.close()
    assert got == want
