"""The boto3 adapter below the getter: client settings and error translation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)
from test_getter_fakes import client_error

from kinesis_spout.errors import (
    CredentialsError,
    EndpointUnreachableError,
    ExpiredIteratorError,
    KinesisError,
    StreamNotFoundError,
    ThrottledError,
    TransientKinesisError,
)
from kinesis_spout.kinesis.api import translate
from kinesis_spout.kinesis.client import make_client, utc_timestamp


def test_utc_timestamp_parses_epoch_numbers_and_strings_to_utc() -> None:
    assert utc_timestamp(0) == datetime(1970, 1, 1, tzinfo=UTC)
    assert utc_timestamp(1.5).microsecond == 500_000
    assert utc_timestamp(1.5).tzinfo is UTC
    parsed = utc_timestamp("2026-01-01T02:00:00+02:00")
    assert parsed == datetime(2026, 1, 1, tzinfo=UTC)
    assert parsed.utcoffset() == timedelta(0)
    assert utc_timestamp("2026-01-01T00:00:00Z").tzinfo == UTC


def test_client_has_botocore_retries_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    client = make_client("http://127.0.0.1:9", "eu-west-1")
    assert client.meta.endpoint_url == "http://127.0.0.1:9"
    assert client.meta.region_name == "eu-west-1"
    assert client.meta.config.retries["total_max_attempts"] == 1


def test_client_honours_boto3s_endpoint_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", "http://127.0.0.1:4599")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert make_client(None).meta.endpoint_url == "http://127.0.0.1:4599"


@pytest.mark.parametrize(
    ("exc", "kind", "retriable"),
    [
        (client_error("ResourceNotFoundException"), StreamNotFoundError, False),
        (client_error("ProvisionedThroughputExceededException"), ThrottledError, True),
        (client_error("LimitExceededException"), ThrottledError, True),
        (client_error("ThrottlingException"), ThrottledError, True),
        (client_error("ExpiredIteratorException"), ExpiredIteratorError, True),
        (client_error("UnrecognizedClientException"), CredentialsError, False),
        (client_error("ExpiredTokenException"), CredentialsError, False),
        (client_error("InternalFailure", 500), TransientKinesisError, True),
        (client_error("Whatever", 503), TransientKinesisError, True),
        (client_error("InvalidArgumentException"), KinesisError, False),
        (NoCredentialsError(), CredentialsError, False),
        (EndpointConnectionError(endpoint_url="http://x"), EndpointUnreachableError, True),
        (ConnectTimeoutError(endpoint_url="http://x"), EndpointUnreachableError, True),
        (ConnectionClosedError(endpoint_url="http://x"), TransientKinesisError, True),
        (ReadTimeoutError(endpoint_url="http://x"), TransientKinesisError, True),
    ],
)
def test_botocore_errors_become_ours(
    exc: Exception, kind: type[KinesisError], retriable: bool
) -> None:
    out = translate(exc, "GetRecords s/shard-1")
    assert type(out) is kind
    assert isinstance(out, KinesisError) and out.retriable is retriable
    assert "GetRecords s/shard-1" in str(out)


def test_other_exceptions_pass_through() -> None:
    err = ValueError("mine")
    assert translate(err, "x") is err
