"""``kinesis-spout status`` of a job of several streams (issue 24): one table per stream,
``--stream NAME`` picks one, ``--json`` keeps its format and adds the ``streams`` list."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kit import spout_config

from devkit.status import run_status, status_json
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client, make_payloads, put_records

pytestmark = pytest.mark.integration


def test_one_table_per_stream_and_a_streams_list(
    moto_server: MotoServer, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(moto_server.endpoint_url)
    names = {f"{unique_name}-a": 1, f"{unique_name}-b": 3}
    for name, shards in names.items():
        create_stream(client, name, shards)
        put_records(client, name, make_payloads(12 * shards, 20))
    store = f"file://{tmp_path / 'checkpoints'}"
    cfg = spout_config(
        under=tmp_path,
        streams=list(names),
        job_name="billing",
        endpoint_url=moto_server.endpoint_url,
        checkpoint_store=store,
    )
    with KinesisSpout(cfg) as spout:  # every record done and checkpointed
        deadline = time.monotonic() + 30
        while not spout.is_idle:
            assert time.monotonic() < deadline, spout.stats()
            spout.ack_many(spout.next_batch(100))
            time.sleep(0.02)
    flags = ["--job-name", "billing", "--endpoint-url", moto_server.endpoint_url]
    flags += ["--checkpoint-store", store, "--dead-letter", str(tmp_path / "dead-letter")]
    streams = [a for name in names for a in ("--stream", name)]

    proc = run_status(*flags, *streams)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout
    for name in names:
        assert f"job 'billing' on stream '{name}' (ACTIVE)" in table
    assert table.count("caught up") == sum(names.values())

    doc = status_json(*flags, *streams)
    first = next(iter(names))
    assert doc["format"] == 1 and doc["stream"] == first  # a one-stream reader's keys
    assert [s["stream"] for s in doc["streams"]] == list(names)
    assert [len(s["shards"]) for s in doc["streams"]] == list(names.values())
    assert all(sh["checkpoint"] is not None for s in doc["streams"] for sh in s["shards"])

    last = list(names)[-1]
    one = run_status(*flags, "--stream", last).stdout
    assert f"on stream '{last}'" in one and f"on stream '{first}'" not in one
