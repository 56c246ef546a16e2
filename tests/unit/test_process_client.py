"""kinesis.client.process_client: one boto3 client per process and endpoint, shared by
every read task of an executor (the Spark job's polled and subscribed reads, the
streaming source's)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from kinesis_spout.kinesis.client import process_client


def test_one_client_per_endpoint_region_and_profile() -> None:
    a = process_client("http://127.0.0.1:1", "us-east-1")
    assert process_client("http://127.0.0.1:1", "us-east-1") is a
    assert process_client("http://127.0.0.1:2", "us-east-1") is not a
    assert process_client("http://127.0.0.1:1", "eu-west-1") is not a
    assert process_client("http://127.0.0.1:1", "us-east-1", max_pool_connections=64) is not a


def test_threads_asking_at_once_get_the_same_client() -> None:
    with ThreadPoolExecutor(8) as pool:
        clients = list(
            pool.map(lambda _: process_client("http://127.0.0.1:3", "us-east-1"), range(32))
        )
    assert len({id(c) for c in clients}) == 1
