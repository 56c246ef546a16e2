"""The fault proxy itself, in front of a real moto server."""

from __future__ import annotations

from typing import Any

import pytest

from devkit.faultproxy import FaultProxy, InjectedFaults
from kinesis_spout.errors import (
    ConfigError,
    ExpiredIteratorError,
    ThrottledError,
    TransientKinesisError,
)
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.testing.servers import MotoServer, free_port
from kinesis_spout.testing.streams import create_stream, emulator_client, put_records

pytestmark = pytest.mark.integration


@pytest.fixture
def stream(moto_client: Any, unique_name: str) -> str:
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, [(f"k{i}", b"x") for i in range(10)])
    return unique_name


def test_forwards_untouched_by_default(
    moto_server: MotoServer, moto_client: Any, stream: str
) -> None:
    with FaultProxy(moto_server.endpoint_url) as proxy:
        via = emulator_client(proxy.endpoint_url).list_shards(StreamName=stream)["Shards"]
        assert via == moto_client.list_shards(StreamName=stream)["Shards"]
        assert proxy.injected == InjectedFaults(forwarded=1)
        assert proxy.requests == {"ListShards": 1}


@pytest.mark.parametrize(
    ("rates", "kind", "counter"),
    [
        ({"throttle": 1.0}, ThrottledError, "throttle"),
        ({"error": 1.0}, TransientKinesisError, "error"),
        ({"drop": 1.0}, TransientKinesisError, "drop"),
        ({"expire": 1.0}, ExpiredIteratorError, "expire"),
    ],
)
def test_each_fault_kind_reaches_the_adapter_as_our_error(
    moto_server: MotoServer,
    stream: str,
    rates: dict[str, float],
    kind: type[Exception],
    counter: str,
) -> None:
    with FaultProxy(moto_server.endpoint_url, **rates) as proxy:
        api = KinesisApi(emulator_client(proxy.endpoint_url), stream)
        proxy.operations = frozenset({"GetRecords"})
        iterator = api.shard_iterator("shardId-000000000000")
        for _ in range(4):
            with pytest.raises(kind):
                api.get_records("shardId-000000000000", iterator, 100)
        got = proxy.injected
        if counter == "drop":
            assert got.drop_before + got.drop_after == 4
        else:
            assert getattr(got, counter) == 4
        assert got.total == 4 and got.forwarded == 1  # the GetShardIterator
        proxy.clear_faults()
        api.get_records("shardId-000000000000", iterator, 100)
        assert proxy.injected.forwarded == 2


def test_throttle_codes_follow_the_operation(moto_server: MotoServer, stream: str) -> None:
    with FaultProxy(moto_server.endpoint_url, throttle=1.0) as proxy:
        client = emulator_client(proxy.endpoint_url)
        with pytest.raises(Exception, match="LimitExceededException"):
            client.list_shards(StreamName=stream)
        with pytest.raises(Exception, match="ProvisionedThroughputExceededException"):
            client.get_shard_iterator(
                StreamName=stream, ShardId="shardId-000000000000", ShardIteratorType="LATEST"
            )


def test_a_drop_after_forwarding_means_the_upstream_did_the_work(
    moto_server: MotoServer, moto_client: Any, stream: str
) -> None:
    with FaultProxy(moto_server.endpoint_url, drop=1.0, seed=3) as proxy:
        client = emulator_client(proxy.endpoint_url)
        for _ in range(6):
            with pytest.raises(Exception, match="Connection was closed"):
                client.put_record(StreamName=stream, PartitionKey="k", Data=b"maybe")
        landed = proxy.injected.drop_after
    assert 0 < landed < 6
    total = 0
    for sid in ("shardId-000000000000", "shardId-000000000001"):
        it = moto_client.get_shard_iterator(
            StreamName=stream, ShardId=sid, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        total += sum(
            r["Data"] == b"maybe" for r in moto_client.get_records(ShardIterator=it)["Records"]
        )
    assert total == landed


def test_same_seed_same_faults(moto_server: MotoServer, stream: str) -> None:
    def pattern(seed: int) -> list[str]:
        out = []
        with FaultProxy(moto_server.endpoint_url, throttle=0.3, error=0.3, seed=seed) as proxy:
            client = emulator_client(proxy.endpoint_url)
            for _ in range(12):
                try:
                    client.list_shards(StreamName=stream)
                    out.append("ok")
                except Exception as exc:  # noqa: BLE001 - recording what happened
                    out.append(type(exc).__name__)
        return out

    first = pattern(9)
    assert first == pattern(9)
    assert "ok" in first and len(set(first)) == 3  # forwarded, throttled and 500s all seen


def test_rates_are_validated() -> None:
    with pytest.raises(ConfigError, match="throttle=1.5"):
        FaultProxy("http://127.0.0.1:1", throttle=1.5)
    proxy = FaultProxy("http://127.0.0.1:1", throttle=0.6)
    with pytest.raises(ConfigError, match="a sum of at most 1"):
        proxy.error = 0.5
    proxy.drop = 0.4
    assert (proxy.throttle, proxy.drop) == (0.6, 0.4)
    with pytest.raises(ConfigError, match="upstream_url"):
        FaultProxy("127.0.0.1:4566")


def test_upstream_down_is_a_5xx(stream: str) -> None:
    with FaultProxy(f"http://127.0.0.1:{free_port()}") as proxy:
        api = KinesisApi(emulator_client(proxy.endpoint_url), stream)
        with pytest.raises(TransientKinesisError, match="503|ServiceUnavailable"):
            api.list_shards()
        assert proxy.upstream_errors == 1
