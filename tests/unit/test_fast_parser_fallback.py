"""The fast GetRecords parser hands an answer it does not expect to botocore's own
parser (a real HTTP answer from a loopback server), and says so once."""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest

from kinesis_spout.kinesis import client as client_module
from kinesis_spout.kinesis.client import make_client

RECORD = {
    "SequenceNumber": "49590338271490256608559692538361571095921575989136588898",
    "PartitionKey": "pk",
    "Data": base64.b64encode(b"hello").decode(),
    "ApproximateArrivalTimestamp": 1764000000.5,
}
ODD = {
    "Records": [{**RECORD, "SomeNewField": {"nested": 1}}],
    "NextShardIterator": "it-2",
    "MillisBehindLatest": 0,
    "AFutureTopLevelField": [1, 2],
}
PLAIN = {"Records": [RECORD], "NextShardIterator": "it-2", "MillisBehindLatest": 0}


class _Answer(BaseHTTPRequestHandler):
    body: bytes = b""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("x-amzn-RequestId", "req-1")
        self.send_header("Content-Length", str(len(self.server.body)))  # type: ignore[attr-defined]
        self.end_headers()
        self.wfile.write(self.server.body)  # type: ignore[attr-defined]

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    client_module._FALLBACK_SAID.clear()
    yield srv
    srv.shutdown()
    srv.server_close()


def _url(srv: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


def _botocore_answer(srv: ThreadingHTTPServer) -> dict[str, Any]:
    plain = boto3.session.Session().client(
        "kinesis",
        endpoint_url=_url(srv),
        region_name="us-east-1",
        aws_access_key_id="t",
        aws_secret_access_key="t",
    )
    out: dict[str, Any] = plain.get_records(ShardIterator="it-1")
    return out


def test_an_unexpected_answer_is_parsed_by_botocore_and_said_once(
    server: ThreadingHTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.body = json.dumps(ODD).encode()  # type: ignore[attr-defined]
    fast = make_client(_url(server), "us-east-1")
    with caplog.at_level(logging.INFO, logger="kinesis_spout.kinesis.client"):
        first = fast.get_records(ShardIterator="it-1")
        second = fast.get_records(ShardIterator="it-1")
    expected = _botocore_answer(server)
    for got in (first, second):
        assert "AFutureTopLevelField" not in got  # botocore drops what its model lacks
        assert got["Records"][0]["Data"] == b"hello"
        assert got["Records"] == expected["Records"]
        assert got["NextShardIterator"] == "it-2"
    said = [r for r in caplog.records if "fast GetRecords parser not used" in r.getMessage()]
    assert len(said) == 1 and "unknown keys" in said[0].getMessage()


def test_an_expected_answer_takes_the_fast_path_with_the_same_result(
    server: ThreadingHTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.body = json.dumps(PLAIN).encode()  # type: ignore[attr-defined]
    fast = make_client(_url(server), "us-east-1")
    with caplog.at_level(logging.INFO, logger="kinesis_spout.kinesis.client"):
        got = fast.get_records(ShardIterator="it-1")
    assert not [r for r in caplog.records if "not used" in r.getMessage()]
    assert got["Records"] == _botocore_answer(server)["Records"]
    assert got["ResponseMetadata"]["RequestId"] == "req-1"


def test_bad_base64_goes_to_botocore(server: ThreadingHTTPServer) -> None:
    odd = {**PLAIN, "Records": [{**RECORD, "Data": "not base64!"}]}
    server.body = json.dumps(odd).encode()  # type: ignore[attr-defined]
    fast = make_client(_url(server), "us-east-1")
    with pytest.raises(Exception) as got:  # botocore's own error, as without the fast path
        fast.get_records(ShardIterator="it-1")
    with pytest.raises(type(got.value)):
        _botocore_answer(server)


def test_missing_botocore_internals_leave_botocore_event_streams(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    client_module._FALLBACK_SAID.clear()
    monkeypatch.delattr(client_module.EventStreamBuffer, "_prepare_for_next_message")
    with caplog.at_level(logging.INFO, logger="kinesis_spout.kinesis.client"):
        parser = client_module._FastParsers().create_parser("json")
    assert not isinstance(parser._parser._event_stream_parser, client_module._FastEvents)
    assert any("EventStreamBuffer differs" in r.getMessage() for r in caplog.records)
