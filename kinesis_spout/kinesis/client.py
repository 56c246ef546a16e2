"""Building the boto3 Kinesis client.

Against an emulator (an explicit endpoint URL) with no credentials set,
dummy credentials are used, since emulators accept any.
"""

from __future__ import annotations

import os
from typing import Any

import boto3
from botocore.config import Config as BotoConfig

DUMMY_CREDENTIALS = {"aws_access_key_id": "test", "aws_secret_access_key": "test"}


def _has_credentials() -> bool:
    session = boto3.session.Session()
    return session.get_credentials() is not None


def make_client(
    endpoint_url: str | None = None,
    region: str = "us-east-1",
    *,
    connect_timeout: float = 5.0,
    read_timeout: float = 30.0,
    max_pool_connections: int = 16,
) -> Any:
    """A boto3 Kinesis client.

    botocore's own retries are turned off (``total_max_attempts=1``; note that
    botocore's ``max_attempts=1`` would still allow one retry, with a blocking
    sleep): the getter does its own backoff so that it stays non-blocking and
    sees every fault.
    ``endpoint_url=None`` keeps boto3's resolution, which honours
    ``AWS_ENDPOINT_URL_KINESIS`` / ``AWS_ENDPOINT_URL``.
    """
    cfg = BotoConfig(
        region_name=region,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"total_max_attempts": 1, "mode": "standard"},
        max_pool_connections=max_pool_connections,
    )
    kwargs: dict[str, Any] = {"config": cfg, "region_name": region}
    effective_endpoint = (
        endpoint_url
        or os.environ.get("AWS_ENDPOINT_URL_KINESIS")
        or os.environ.get("AWS_ENDPOINT_URL")
    )
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url
    if effective_endpoint and not _has_credentials():
        kwargs.update(DUMMY_CREDENTIALS)
    return boto3.client("kinesis", **kwargs)
