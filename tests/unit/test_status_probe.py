"""The lag probe's reading of one GetRecords page (a scripted boto3 client; pure logic):
where the iterator opens, ``Limit=1``, pending or caught up, and a failed call."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.status.model import LagProbe, ProbeStart
from kinesis_spout.status.sources_kinesis import probe, probe_lags

ARRIVAL = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


class ScriptedClient:
    """GetShardIterator and GetRecords answering one scripted page (or error)."""

    def __init__(self, page: dict[str, Any] | None = None, error: str | None = None) -> None:
        self.page = page or {}
        self.error = error
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def get_shard_iterator(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(("GetShardIterator", kw))
        return {"ShardIterator": f"it-{kw['ShardId']}"}

    def get_records(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(("GetRecords", kw))
        if self.error:
            answer = {
                "Error": {"Code": self.error, "Message": "slow down"},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
            raise ClientError(answer, "GetRecords")
        return self.page


def record(seq: str) -> dict[str, Any]:
    return {
        "SequenceNumber": seq,
        "Data": b"x",
        "PartitionKey": "k",
        "ApproximateArrivalTimestamp": ARRIVAL,
    }


def test_a_waiting_record_after_the_checkpoint() -> None:
    client = ScriptedClient(
        {"Records": [record("124")], "MillisBehindLatest": 5000, "NextShardIterator": "n"}
    )
    start = ProbeStart("AFTER_SEQUENCE_NUMBER", "123")
    lag = probe(KinesisApi(client, "orders"), "shardId-1", start)
    assert lag == LagProbe(pending=True, millis_behind_latest=5000, next_arrival=ARRIVAL)
    assert client.calls == [
        (
            "GetShardIterator",
            {
                "StreamName": "orders",
                "ShardId": "shardId-1",
                "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                "StartingSequenceNumber": "123",
            },
        ),
        ("GetRecords", {"ShardIterator": "it-shardId-1", "Limit": 1}),
    ]


def test_caught_up_and_an_empty_page_still_behind() -> None:
    caught_up = ScriptedClient({"Records": [], "MillisBehindLatest": 0, "NextShardIterator": "n"})
    lag = probe(KinesisApi(caught_up, "orders"), "s", ProbeStart("TRIM_HORIZON"))
    assert lag == LagProbe(pending=False, millis_behind_latest=0)
    assert caught_up.calls[0][1]["ShardIteratorType"] == "TRIM_HORIZON"
    sparse = ScriptedClient({"Records": [], "MillisBehindLatest": 60000, "NextShardIterator": "n"})
    lag = probe(KinesisApi(sparse, "orders"), "s", ProbeStart("AT_TIMESTAMP", timestamp=ARRIVAL))
    assert lag == LagProbe(pending=True, millis_behind_latest=60000)
    assert sparse.calls[0][1]["Timestamp"] == ARRIVAL


def test_a_failed_call_is_an_unknown_lag_naming_the_error() -> None:
    client = ScriptedClient(error="ProvisionedThroughputExceededException")
    lags, calls = probe_lags(client, "orders", {"s": ProbeStart("TRIM_HORIZON")})
    assert lags["s"].pending is None and lags["s"].millis_behind_latest is None
    assert "ProvisionedThroughputExceededException" in (lags["s"].error or "")
    assert calls == 2
