"""``kinesis-spout status`` and ``dead-letters`` on a ``dynamodb://`` config (moto's server
for Kinesis and DynamoDB, over HTTP), the installed command as users run it.

One run walks the job's life: a table that does not exist yet (a note; status creates
nothing), a job-lease holder running and then killed, a spout that reads every record
(one dead-lettered), then each shard's checkpoint with its age, the lease free again,
and the dead letter listed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
import pytest

from devkit.holders import start_lease_holder
from devkit.status import run_status, status_json
from kinesis_spout.config.load import load_config
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

POISON = b"r000000007|"


def read_all(config: Path) -> None:
    """A spout of the config reads and acks every record, failing the poison one (it is
    dead-lettered at once: ``retry_limit = 0``), until idle; closed with its checkpoints."""
    deadline = time.monotonic() + 60
    with KinesisSpout(load_config(str(config))) as spout:
        while True:
            batch = spout.next_batch(100)
            for record in batch:
                if record.data.startswith(POISON):
                    spout.fail(record, "not an order")
                else:
                    spout.ack(record)
            if not batch and spout.is_idle:
                return
            assert time.monotonic() < deadline, spout.stats()
            if not batch:
                time.sleep(0.05)


def test_status_and_dead_letters_on_a_dynamodb_store(
    moto_server: MotoServer, moto_client: Any, dynamodb: str, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 2)
    placed = put_records(moto_client, unique_name, make_payloads(40, 60))
    last: dict[str, str] = {}
    for shard, seq in placed:
        last[shard] = seq if int(seq) > int(last.get(shard, "0")) else last[shard]
    url = f"dynamodb://{unique_name}"
    config = tmp_path / "job.toml"
    config.write_text(
        f'stream_name = "{unique_name}"\njob_name = "billing"\nregion = "us-east-1"\n'
        f'endpoint_url = "{moto_server.endpoint_url}"\ncheckpoint_store = "{url}"\n'
        f'dead_letter = "{tmp_path / "dead"}"\nretry_limit = 0\nempty_shard_backoff = 0.05\n'
    )
    args = ("--config", str(config))
    raw = boto3.client("dynamodb", endpoint_url=dynamodb, region_name="us-east-1")

    # 1. No table yet: a store with no checkpoints, said in a note; nothing is created.
    doc = status_json(*args)
    assert any("DynamoDB table does not exist yet" in note for note in doc["notes"]), doc
    assert all(s["checkpoint"] is None for s in doc["shards"])
    assert unique_name not in raw.list_tables()["TableNames"]

    # 2. A reader holds the job lease; then it is killed (its lease not yet expired).
    holder = start_lease_holder(url, "billing")
    try:
        lease = status_json(*args)["job_lease"]
        assert lease["state"] == "held" and lease["holder"].endswith(f":{holder.pid}")
        assert lease["where"] == f"{url}/billing/@job-lease" and lease["holder_gone"] is False
        proc = run_status(*args)
        assert f"job lease: held by {lease['holder']} since " in proc.stdout, proc.stdout
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    lease = status_json(*args)["job_lease"]
    assert lease["state"] == "held" and lease["holder_gone"] is True

    # 3. A spout reads everything (takes the dead holder's lease over at once).
    read_all(config)
    doc = status_json(*args)
    assert doc["job_lease"]["state"] == "free"
    stored = {s["shard_id"]: s["checkpoint"] for s in doc["shards"]}
    assert {shard: cp["sequence"] for shard, cp in stored.items()} == last
    assert all(0 <= cp["age_seconds"] < 120 for cp in stored.values()), stored
    assert doc["summary"]["dead_letters"] == 1

    # 4. dead-letters on the same config.
    listed = subprocess.run(
        [str(Path(sys.executable).with_name("kinesis-spout")), "dead-letters", "list", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert "not an order" in listed.stdout and "1 dead letter in " in listed.stdout, listed.stdout
