"""Building the boto3 Kinesis client, with cheaper answer parsing.

:func:`make_client` makes a client (:func:`process_client`: the one of an executor
process). Against an emulator (an explicit endpoint URL) with no credentials set, dummy
credentials are used, since emulators accept any.

Its sessions parse timestamps straight to UTC (:func:`utc_timestamp`; botocore's default
converts each ``ApproximateArrivalTimestamp`` through dateutil's ``tzlocal``, which is
costly), and :class:`_FastParsers` parses a successful GetRecords answer and each
``SubscribeToShardEvent`` with one ``json.loads`` (the same result as botocore's
parsers), framing event streams in a growing ``bytearray`` (:class:`_LinearBuffer`).
Other answers, one the fast parser does not expect (an unknown field, a type that
differs), and every event stream where botocore lacks the internals :class:`_LinearBuffer`
relies on go to botocore's parsers, said once at INFO. The costs: docs/reader.md ("API",
the ``client`` row) and docs/efo.md ("Figures").
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config as BotoConfig
from botocore.eventstream import EventStream, EventStreamBuffer
from botocore.parsers import ResponseParserFactory
from botocore.utils import parse_timestamp

if TYPE_CHECKING:
    from kinesis_spout.aws import AssumedRole

log = logging.getLogger(__name__)

ONE_SHOT_RETRIES: Any = {"mode": "standard", "total_max_attempts": 3}
"""botocore's standard retry mode with its default 3 attempts, for one-shot CLI calls."""

DUMMY_CREDENTIALS = {"aws_access_key_id": "test", "aws_secret_access_key": "test"}


def _has_credentials(session: boto3.session.Session) -> bool:
    from botocore.exceptions import PartialCredentialsError

    try:
        return session.get_credentials() is not None
    except PartialCredentialsError as exc:  # a key id without its secret: one line
        from kinesis_spout.aws import incomplete_credentials

        raise incomplete_credentials(exc) from None


def utc_timestamp(value: Any) -> datetime:
    """botocore timestamp parser: epoch seconds (the JSON protocol) or a
    string, as an aware UTC datetime."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    parsed: datetime = parse_timestamp(value)
    return parsed.astimezone(UTC)


def make_client(
    endpoint_url: str | None = None,
    region: str = "us-east-1",
    *,
    profile: str | None = None,
    role: AssumedRole | None = None,
    connect_timeout: float = 5.0,
    read_timeout: float = 30.0,
    max_pool_connections: int = 16,
    one_shot: bool = False,
) -> Any:
    """A boto3 Kinesis client.

    botocore's own retries are turned off (``total_max_attempts=1``; note that
    botocore's ``max_attempts=1`` would still allow one retry, with a blocking
    sleep): the getter does its own backoff so that it stays non-blocking and
    sees every fault. ``one_shot`` (the CLI's single calls: ``status``,
    ``dead-letters redrive``) keeps botocore's standard retry mode instead
    (:data:`ONE_SHOT_RETRIES`): a throttled or 5xx answer is tried again there.
    ``endpoint_url=None`` keeps boto3's resolution, which
    honours ``AWS_ENDPOINT_URL_KINESIS`` / ``AWS_ENDPOINT_URL``. ``profile``: an AWS
    profile (None: ``AWS_PROFILE`` or the default chain, :mod:`kinesis_spout.aws`);
    ``role``: an IAM role assumed with its credentials (the config's ``role_arn``).
    The clients of a profile and role share a botocore session of their own, so the
    UTC timestamp parser changes nothing for other boto3 clients in the process.
    """
    cfg = BotoConfig(
        region_name=region,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries=ONE_SHOT_RETRIES if one_shot else {"total_max_attempts": 1, "mode": "standard"},
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
    if not effective_endpoint:
        check_region(region)
    with _SESSION_LOCK:  # sessions are not thread-safe; the clients they make are
        session = _session(profile, role)
        if effective_endpoint and not _has_credentials(session):
            kwargs.update(DUMMY_CREDENTIALS)
        return session.client("kinesis", **kwargs)


@functools.cache
def known_regions() -> frozenset[str]:
    """Every region of botocore's endpoint data, of every partition (read once)."""
    from botocore.loaders import create_loader

    data = create_loader().load_data("endpoints")
    return frozenset(r for p in data.get("partitions", []) for r in p.get("regions", {}))


def check_region(region: str) -> None:
    """A region AWS has (a custom endpoint takes any name): a mistyped one is a
    :class:`~kinesis_spout.errors.ConfigError` with the close match, not a 500 from a
    host that does not exist after a few seconds of retries."""
    regions = known_regions()
    if not regions or region in regions:
        return
    from kinesis_spout.config.load import did_you_mean
    from kinesis_spout.errors import ConfigError

    hint = did_you_mean(region, regions)
    raise ConfigError(
        "region",
        region,
        "a region of AWS (botocore's list; any name with endpoint_url)"
        + (hint if "did you mean" in hint else ""),
    )


_SESSION_LOCK = threading.Lock()
_SESSIONS: dict[tuple[str | None, AssumedRole | None], boto3.session.Session] = {}


_PROCESS_CLIENTS: dict[tuple[str | None, str, str | None, AssumedRole | None, int, int], Any] = {}
_PROCESS_CLIENTS_LOCK = threading.Lock()


def process_client(
    endpoint_url: str | None,
    region: str,
    *,
    profile: str | None = None,
    role: AssumedRole | None = None,
    max_pool_connections: int = 16,
) -> Any:
    """The boto3 client of this process for an endpoint, region, profile and role, made
    once.

    Executor tasks use it: a Python worker is reused across tasks, and a client is
    thread-safe and costly to build (credentials, endpoint resolution, connection
    pool), so every read task of a process (the Spark job's polled and subscribed
    reads, the streaming source's) shares one per endpoint."""
    key = (endpoint_url, region, profile, role, max_pool_connections, os.getpid())  # per fork
    client = _PROCESS_CLIENTS.get(key)
    if client is None:
        with _PROCESS_CLIENTS_LOCK:
            client = _PROCESS_CLIENTS.get(key)
            if client is None:
                client = _PROCESS_CLIENTS[key] = make_client(
                    endpoint_url,
                    region,
                    profile=profile,
                    role=role,
                    max_pool_connections=max_pool_connections,
                )
    return client


def _session(profile: str | None, role: AssumedRole | None = None) -> boto3.session.Session:
    """One boto3 session per profile and role for this module's clients (a session
    loads the service model once), with the UTC timestamp parser."""
    session = _SESSIONS.get((profile, role))
    if session is None:
        from kinesis_spout.aws import botocore_session

        core = botocore_session(profile, role)
        factory = _FastParsers()
        factory.set_parser_defaults(timestamp_parser=utc_timestamp)
        core.register_component("response_parser_factory", factory)
        session = _SESSIONS[profile, role] = boto3.session.Session(botocore_session=core)
    return session


def _decode_records(records: Any) -> None:
    """Base64 ``Data`` and epoch ``ApproximateArrivalTimestamp`` of parsed JSON records."""
    decode = base64.b64decode
    for rec in records:
        rec["Data"] = decode(rec["Data"])
        arrival = rec.get("ApproximateArrivalTimestamp")
        if arrival is not None:
            rec["ApproximateArrivalTimestamp"] = utc_timestamp(arrival)


class _FastEvents:
    """botocore's event-stream parser, but one ``json.loads`` per ``SubscribeToShardEvent``."""

    def __init__(self, parser: Any) -> None:
        self._parser = parser

    def parse(self, response: dict[str, Any], shape: Any) -> dict[str, Any]:
        headers = response.get("headers") or {}
        if (
            response.get("status_code") != 200
            or headers.get(":message-type") != "event"
            or headers.get(":event-type") != "SubscribeToShardEvent"
            or not response.get("body")
        ):
            return dict(self._parser.parse(response, shape))
        event: dict[str, Any] = json.loads(response["body"])
        _decode_records(event.get("Records", ()))
        return {"SubscribeToShardEvent": event}


_RECORD_TYPES: dict[str, type | tuple[type, ...]] = {
    "SequenceNumber": str,
    "PartitionKey": str,
    "Data": str,
    "EncryptionType": str,
    "ApproximateArrivalTimestamp": (int, float),
}
_FALLBACK_SAID: set[str] = set()


def fall_back(why: str) -> None:
    """Log once per reason that botocore's own parser is used instead of the fast one."""
    if why not in _FALLBACK_SAID:
        _FALLBACK_SAID.add(why)
        log.info("fast GetRecords parser not used (%s): botocore parses these answers", why)


def unexpected(out: Any, shape: Any) -> str | None:
    """Why a parsed GetRecords body is not what the fast parser handles, or None."""
    if not isinstance(out, dict):
        return "the body is not a JSON object"
    members = getattr(shape, "members", None)
    if members is None or not set(out) <= set(members):
        return f"unknown keys {sorted(set(out) - set(members or ()))}"
    records = out.get("Records", [])
    if not isinstance(records, list):
        return "Records is not a list"
    for rec in records:
        if not isinstance(rec, dict) or not all(
            k in _RECORD_TYPES and isinstance(v, _RECORD_TYPES[k]) and not isinstance(v, bool)
            for k, v in rec.items()
        ):
            return "a record with unknown fields or types"
        if not isinstance(rec.get("Data"), str):
            return "a record without Data"
    return None


class _FastGetRecords:
    """botocore's parser, but one ``json.loads`` for a successful GetRecords answer.
    An answer that does not look as expected (:func:`unexpected`: a field or type this
    botocore version would parse differently) goes to botocore's parser, said once."""

    def __init__(self, parser: Any) -> None:
        self._parser = parser

    def parse(self, response: dict[str, Any], shape: Any) -> dict[str, Any]:
        if (
            shape is None
            or shape.name != "GetRecordsOutput"
            or response.get("status_code") != 200
            or not response.get("body")
        ):
            return dict(self._parser.parse(response, shape))
        try:
            out: Any = json.loads(response["body"])
        except ValueError:
            out = None
        why = unexpected(out, shape)
        if why is None:
            try:
                _decode_records(out.get("Records", ()))
            except (ValueError, TypeError):  # binascii.Error is a ValueError
                why = "a record's Data is not base64"
        if why is not None:
            fall_back(why)
            return dict(self._parser.parse(response, shape))
        headers = response.get("headers", {})
        out["ResponseMetadata"] = {
            "RequestId": headers.get("x-amzn-requestid", ""),
            "HTTPStatusCode": 200,
            "HTTPHeaders": headers,
            "RetryAttempts": 0,
        }
        return dict(out)


class _LinearBuffer(EventStreamBuffer):  # type: ignore[misc]
    """botocore's message framing over a ``bytearray`` (linear, not quadratic, in size)."""

    _data: bytearray
    _prelude: Any

    def __init__(self) -> None:
        super().__init__()
        self._data = bytearray()

    def add_data(self, data: bytes) -> None:
        self._data += data

    def _parse_message_bytes(self) -> memoryview:
        # What the message CRC covers, without a copy (released before the buffer shrinks).
        return memoryview(self._data)[8 : self._prelude.payload_end]

    def _prepare_for_next_message(self) -> None:
        del self._data[: self._prelude.total_length]
        self._prelude = None


class _EventStream(EventStream):  # type: ignore[misc]
    """botocore's event stream, read 1 MiB at a time into a :class:`_LinearBuffer`."""

    def _create_raw_event_generator(self) -> Iterator[Any]:
        buffer = _LinearBuffer()
        for chunk in self._raw_stream.stream(1 << 20):
            buffer.add_data(chunk)
            yield from buffer


def _event_stream(parser: Any, response: dict[str, Any], shape: Any) -> Any:
    name = response["context"].get("operation_name")
    return _EventStream(response["body"], shape, parser._event_stream_parser, name)


def _buffer_internals() -> bool:
    """botocore's ``EventStreamBuffer`` still has what :class:`_LinearBuffer` replaces."""
    probe = EventStreamBuffer()
    return (
        all(hasattr(probe, a) for a in ("_data", "_prelude"))
        and all(
            hasattr(EventStreamBuffer, m)
            for m in ("_parse_message_bytes", "_prepare_for_next_message")
        )
        and hasattr(EventStream, "_create_raw_event_generator")
    )


class _FastParsers(ResponseParserFactory):  # type: ignore[misc]
    """botocore's parsers, with the fast GetRecords and event-stream paths where the
    botocore internals they rely on are there (else botocore's own, said once)."""

    def create_parser(self, protocol_name: str) -> Any:
        parser = super().create_parser(protocol_name)
        if protocol_name != "json":
            return parser
        events = getattr(parser, "_event_stream_parser", None)
        if events is None or not hasattr(parser, "_create_event_stream"):
            fall_back("this botocore's JSON parser has no _event_stream_parser")
        elif not _buffer_internals():
            fall_back("this botocore's EventStreamBuffer differs")
        else:
            parser._event_stream_parser = _FastEvents(events)
            parser._create_event_stream = functools.partial(_event_stream, parser)
        return _FastGetRecords(parser)
