"""Fakes for the unit tests of the getter and the spout (pure logic, no server).

``FakeKinesis`` mimics the four boto3 calls the adapter makes, raising real
botocore ``ClientError`` objects so the adapter's error translation runs too;
faults are scripted per operation (the fake clock is ``kit.FakeClock``). The
tests at the bottom check the fake itself, so the other tests can trust it.
"""

from __future__ import annotations

import itertools
from collections import defaultdict, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

AGG_MAGIC = b"\xf3\x89\x9a\xc2"


def client_error(code: str, status: int = 400, op: str = "GetRecords") -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": f"fake {code}"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        op,
    )


@dataclass
class FakeShard:
    shard_id: str
    parents: tuple[str, ...] = ()
    records: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False
    children: tuple[str, ...] = ()


class FakeKinesis:
    """An in-memory stream behind the boto3 client methods the adapter uses."""

    def __init__(self, stream: str = "s", shards: int = 2, seq_step: int = 10) -> None:
        self.stream = stream
        self.shards: dict[str, FakeShard] = {}
        self.child_shards_in_answers = True
        self.arrival = datetime(2026, 1, 1, tzinfo=UTC)  # of the records put from now on
        self._seq = itertools.count(seq_step, seq_step)
        self.faults: dict[str, deque[Exception | None]] = defaultdict(deque)
        self.calls: dict[str, int] = defaultdict(int)
        self.iterator_requests: list[dict[str, Any]] = []
        self.limits: list[int] = []
        self.page_size: int | None = None
        self.exists = True
        self.meta = SimpleNamespace(endpoint_url="http://fake", region_name="us-east-1")
        for i in range(shards):
            self.add_shard(f"shardId-{i:012d}")

    # --- setup ----------------------------------------------------------------
    def add_shard(self, shard_id: str, parents: tuple[str, ...] = ()) -> FakeShard:
        s = FakeShard(shard_id, parents)
        self.shards[shard_id] = s
        return s

    def put(self, shard_id: str, data: bytes, pk: str = "pk") -> str:
        seq = str(next(self._seq))
        self.shards[shard_id].records.append(
            {
                "SequenceNumber": seq,
                "Data": data,
                "PartitionKey": pk,
                "ApproximateArrivalTimestamp": self.arrival,
            }
        )
        return seq

    def put_many(self, shard_id: str, n: int, prefix: str = "r") -> list[str]:
        return [self.put(shard_id, f"{prefix}{i}".encode()) for i in range(n)]

    def split(self, parent: str, children: tuple[str, ...]) -> None:
        self.shards[parent].closed = True
        self.shards[parent].children = children
        for c in children:
            self.add_shard(c, (parent,))

    def fault(self, op: str, *excs: Exception | None) -> None:
        """Script the next calls of ``op``: raise each exception in turn (None: answer)."""
        self.faults[op].extend(excs)

    def _maybe_fault(self, op: str) -> None:
        self.calls[op] += 1
        if self.faults[op]:
            exc = self.faults[op].popleft()
            if exc is not None:
                raise exc

    # --- boto3 surface ----------------------------------------------------------
    def describe_stream_summary(self, StreamName: str) -> dict[str, Any]:  # noqa: N803
        self._maybe_fault("DescribeStreamSummary")
        if not self.exists or StreamName != self.stream:
            raise client_error("ResourceNotFoundException", op="DescribeStreamSummary")
        return {"StreamDescriptionSummary": {"StreamStatus": "ACTIVE"}}

    def list_shards(self, **kw: Any) -> dict[str, Any]:
        self._maybe_fault("ListShards")
        ids = list(self.shards)
        start = int(kw.get("NextToken", "0"))
        end = len(ids) if self.page_size is None else min(len(ids), start + self.page_size)
        out = []
        for sid in ids[start:end]:
            s = self.shards[sid]
            d: dict[str, Any] = {"ShardId": sid, "SequenceNumberRange": {}}
            if s.parents:
                d["ParentShardId"] = s.parents[0]
            if len(s.parents) > 1:
                d["AdjacentParentShardId"] = s.parents[1]
            if s.closed:
                d["SequenceNumberRange"]["EndingSequenceNumber"] = "9223372036854775807"
            out.append(d)
        resp: dict[str, Any] = {"Shards": out}
        if end < len(ids):
            resp["NextToken"] = str(end)
        return resp

    def get_shard_iterator(self, **kw: Any) -> dict[str, Any]:
        self._maybe_fault("GetShardIterator")
        self.iterator_requests.append(kw)
        s = self.shards[kw["ShardId"]]
        typ = kw["ShardIteratorType"]
        recs = s.records
        if typ == "TRIM_HORIZON":
            pos = 0
        elif typ == "LATEST":
            pos = len(recs)
        elif typ == "AT_TIMESTAMP":
            when = kw["Timestamp"]
            pos = next(
                (i for i, r in enumerate(recs) if r["ApproximateArrivalTimestamp"] >= when),
                len(recs),
            )
        else:
            seq = int(kw["StartingSequenceNumber"])
            pos = next(
                (i for i, r in enumerate(recs) if int(r["SequenceNumber"]) >= seq), len(recs)
            )
            if (
                typ == "AFTER_SEQUENCE_NUMBER"
                and pos < len(recs)
                and int(recs[pos]["SequenceNumber"]) == seq
            ):
                pos += 1
        return {"ShardIterator": f"{s.shard_id}|{pos}"}

    def get_records(self, ShardIterator: str, Limit: int) -> dict[str, Any]:  # noqa: N803
        self._maybe_fault("GetRecords")
        self.limits.append(Limit)
        sid, pos_s = ShardIterator.split("|")
        s = self.shards[sid]
        pos = int(pos_s)
        recs = s.records[pos : pos + Limit]
        nxt = pos + len(recs)
        resp: dict[str, Any] = {
            "Records": recs,
            "MillisBehindLatest": 0 if nxt >= len(s.records) else 1000,
        }
        if s.closed and nxt >= len(s.records):
            if not self.child_shards_in_answers:  # some emulators and older API paths
                return resp
            resp["ChildShards"] = [
                {"ShardId": c, "ParentShards": [sid], "HashKeyRange": {}} for c in s.children
            ]
        else:
            resp["NextShardIterator"] = f"{sid}|{nxt}"
        return resp


def unreachable() -> EndpointConnectionError:
    return EndpointConnectionError(endpoint_url="http://fake")


# --- tests of the fake ------------------------------------------------------


def test_fake_reads_pages_and_ends_closed_shards() -> None:
    fk = FakeKinesis(shards=1)
    fk.put_many("shardId-000000000000", 5)
    it = fk.get_shard_iterator(ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON")
    r = fk.get_records(ShardIterator=it["ShardIterator"], Limit=3)
    assert [x["SequenceNumber"] for x in r["Records"]] == ["10", "20", "30"]
    r = fk.get_records(ShardIterator=r["NextShardIterator"], Limit=3)
    assert len(r["Records"]) == 2 and r["MillisBehindLatest"] == 0
    fk.split("shardId-000000000000", ("shardId-000000000001",))
    r = fk.get_records(ShardIterator=r["NextShardIterator"], Limit=3)
    assert "NextShardIterator" not in r and r["ChildShards"][0]["ShardId"].endswith("1")


def test_fake_after_and_at_sequence() -> None:
    fk = FakeKinesis(shards=1)
    fk.put_many("shardId-000000000000", 3)
    at = fk.get_shard_iterator(
        ShardId="shardId-000000000000",
        ShardIteratorType="AT_SEQUENCE_NUMBER",
        StartingSequenceNumber="20",
    )
    after = fk.get_shard_iterator(
        ShardId="shardId-000000000000",
        ShardIteratorType="AFTER_SEQUENCE_NUMBER",
        StartingSequenceNumber="20",
    )
    assert at["ShardIterator"].endswith("|1") and after["ShardIterator"].endswith("|2")


def test_fake_scripted_faults() -> None:
    fk = FakeKinesis(shards=1)
    fk.fault("GetRecords", client_error("ProvisionedThroughputExceededException"))
    with pytest.raises(ClientError):
        fk.get_records(ShardIterator="shardId-000000000000|0", Limit=1)
    assert fk.get_records(ShardIterator="shardId-000000000000|0", Limit=1)["Records"] == []
