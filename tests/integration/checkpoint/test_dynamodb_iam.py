"""The IAM actions of a ``dynamodb://`` store's policy (docs/iam/dynamodb-store.json, which
docs/checkpoints.md links and docs/deploy.md shows) are exactly those its calls need: a run
of everything the store, the job lease, the batch-end records and ``status`` do, on moto's
server, with each DynamoDB call recorded by a botocore event hook on the client they share
(a transaction needs the actions of what it holds)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kinesis_spout.checkpoint import open_store
from kinesis_spout.checkpoint.batch_ends import BatchEnd
from kinesis_spout.checkpoint.dynamodb_lease import DynamoDbJobLease, LeaseItem
from kinesis_spout.checkpoint.dynamodb_table import dynamodb_client, iam_action
from kinesis_spout.checkpoint.factory import open_batch_ends
from kinesis_spout.checkpoint.joblease import open_job_lease
from kinesis_spout.records import Checkpoint, ShardPosition
from kinesis_spout.status.sources_store import read_store

pytestmark = pytest.mark.integration

POLICY = Path(__file__).resolve().parents[3] / "docs" / "iam" / "dynamodb-store.json"
STREAM = "orders"


def documented_actions() -> set[str]:
    """The actions the store's IAM policy allows."""
    statements = json.loads(POLICY.read_text())["Statement"]
    return {action for s in statements for action in s["Action"]}


def cp(seq: str, shard: int = 0) -> Checkpoint:
    return Checkpoint(STREAM, f"shardId-{shard:012d}", seq)


def test_the_documented_iam_actions_are_exactly_the_ones_the_calls_need(
    dynamodb: str, unique_name: str
) -> None:
    needed: set[str] = set()

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        needed.update(iam_action(model.name, params))

    client = dynamodb_client("us-east-1")
    client.meta.events.register("provide-client-params.dynamodb.*", record)
    url = f"dynamodb://{unique_name}?lease_seconds=1"
    try:
        # The job lease: taken (the table made on first use), renewed, read by status.
        lease = open_job_lease(url, "billing", region="us-east-1")
        lease.acquire()
        assert isinstance(lease, DynamoDbJobLease)
        deadline = time.monotonic() + 30
        while (item := LeaseItem.read(lease.table, lease.keys)) is None or item.counter < 2:
            assert time.monotonic() < deadline, "the heartbeat never renewed the lease"
            time.sleep(0.05)
        # Checkpoints under the lease: every write of the store.
        store = open_store(url, "billing", region="us-east-1")
        store.load(STREAM)
        store.save(cp("10"))
        store.save(cp("10"))  # a no-op: the lease is checked by a read
        store.save_many([cp("11"), cp("5", 1), cp("6", 2)])
        store.mark_ended(STREAM, "shardId-000000000002", "w")
        store.reset(STREAM, "shardId-000000000001", cp("1", 1))
        store.claim_stream(STREAM, "2026-01-01T00:00:00+00:00")
        store.claim_stream(STREAM, "2026-02-01T00:00:00+00:00")  # recreated: moved aside
        # Batch-end records: recorded (first writer wins), read, forgotten.
        ends = open_batch_ends(url, "billing", STREAM, region="us-east-1")
        end = BatchEnd(ShardPosition("3", 0, count=1))
        for batch in (1, 2):
            ends.record("run", batch, "shardId-000000000000", end)
        ends.record("run", 2, "shardId-000000000000", end)
        ends.get("run", 1, "shardId-000000000000")
        assert ends.forget_before("run", 2) == 1
        # status reads; the lease let go; then a write with no lease held.
        read_store(url, "billing", STREAM, region="us-east-1")
        lease.release()
        store.save(cp("20"))
        store.close()
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb.*", record)
    assert needed == documented_actions()
