"""The boto3 adapter: the only place that sees boto3 dictionaries and botocore errors.

:class:`KinesisApi` wraps one stream. Each method makes exactly one request
(``list_shards`` follows pagination) and either returns value objects or raises a
:class:`~kinesis_spout.errors.KinesisSpoutError`; it never sleeps and never
retries: backoff is the caller's, so callers stay non-blocking.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from kinesis_spout.aws import incomplete_credentials
from kinesis_spout.config import InitialPosition
from kinesis_spout.errors import (
    CredentialsError,
    EndpointUnreachableError,
    ExpiredIteratorError,
    KinesisError,
    ResourceInUseError,
    StreamNotFoundError,
    StreamRecreatedError,
    ThrottledError,
    TransientKinesisError,
)
from kinesis_spout.kinesis.aggregation import MAGIC, deaggregate
from kinesis_spout.records import Record, ShardInfo
from kinesis_spout.words import one_line
from tracker import SequenceKey

log = logging.getLogger(__name__)

T = TypeVar("T")

_THROTTLE_CODES = {
    "ProvisionedThroughputExceededException",
    "LimitExceededException",
    "ThrottlingException",
    "KMSThrottlingException",
    "RequestLimitExceeded",
}
_CREDENTIAL_CODES = {
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "AccessDeniedException",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "MissingAuthenticationTokenException",
    "SignatureDoesNotMatch",
}
_TRANSIENT_CODES = {"InternalFailure", "InternalFailureException", "ServiceUnavailable"}


@dataclass(frozen=True, slots=True)
class GetRecordsResult:
    """One GetRecords answer, de-aggregated."""

    records: list[Record]
    next_iterator: str | None
    """``None``: the shard is closed and this was its last page."""
    millis_behind_latest: int | None
    child_shards: tuple[ShardInfo, ...]
    raw_count: int
    """Kinesis records in the answer (before de-aggregation)."""
    skipped: tuple[SequenceKey, ...] = ()
    """Keys of KPL aggregates that held no user record (skipped, nothing to hand out)."""
    corrupt_aggregates: int = 0
    """Records with the KPL magic but a bad checksum or body, handed on whole."""


@dataclass(slots=True)
class AggregateCounts:
    """What :func:`to_records` skipped or passed through while de-aggregating."""

    skipped: list[SequenceKey] = field(default_factory=list)
    """Keys of aggregates with zero user records, in shard order."""
    corrupt: int = 0
    """Aggregates with a bad checksum or body, handed on as one plain record."""


def _xml_error(body: str, default_code: str) -> tuple[str, str]:
    """``(code, message)`` of an XML ``<Error>`` body."""
    code = re.search(r"<Code>\s*([^<]+?)\s*</Code>", body)
    message = re.search(r"<Message>\s*([^<]*?)\s*</Message>", body)
    return (code.group(1) if code else default_code), (message.group(1) if message else body)


def translate(exc: Exception, what: str) -> Exception:
    """The project's exception for a botocore one (others are returned as is)."""
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        msg = str(err.get("Message", "")) or str(exc)
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code.isdigit() and "<Code>" in msg:
            # An XML error body (some emulators and gateways): botocore leaves the code unparsed.
            code, msg = _xml_error(msg, code)
        msg = one_line(msg, 200)  # an HTML error page: its first line
        if code == "ResourceNotFoundException":
            return StreamNotFoundError(f"{what}: {msg}")
        if code == "ResourceInUseException":
            return ResourceInUseError(f"{what}: {msg}")
        if code in _THROTTLE_CODES:
            return ThrottledError(f"{what}: {code}: {msg}")
        if code == "ExpiredIteratorException":
            return ExpiredIteratorError(f"{what}: {msg}")
        if code in _CREDENTIAL_CODES or status in (401, 403):
            return CredentialsError(f"{what}: credentials rejected ({code}): {msg}")
        if code in _TRANSIENT_CODES or status >= 500:
            return TransientKinesisError(f"{what}: {code or status}: {msg}")
        return KinesisError(f"{what}: {code}: {msg}")
    if isinstance(exc, NoCredentialsError):
        return CredentialsError(f"{what}: no AWS credentials found ({exc})")
    if isinstance(exc, PartialCredentialsError):
        return incomplete_credentials(exc)
    if isinstance(exc, EndpointConnectionError | ConnectTimeoutError):
        return EndpointUnreachableError(f"{what}: endpoint unreachable: {exc}")
    if isinstance(exc, ConnectionClosedError | ReadTimeoutError):
        return TransientKinesisError(f"{what}: connection dropped: {exc}")
    if isinstance(exc, BotoCoreError):
        return TransientKinesisError(f"{what}: {type(exc).__name__}: {exc}")
    return exc


class KinesisApi:
    """One stream's Kinesis calls, returning value objects."""

    def __init__(self, client: Any, stream_name: str, stream_arn: str | None = None) -> None:
        self.client = client
        self.stream_name = stream_name
        self.stream_arn = stream_arn
        """Given: the calls name the stream by ``StreamARN`` (a stream of another account)."""
        self.created: datetime | None = None
        """The stream's creation time, from :meth:`check_stream`: part of its identity (a
        stream deleted and created again under its name is another stream)."""
        self.calls = 0
        self._token_needs_stream = False
        self.server_time: datetime | None = None
        """The ``Date`` header of the last GetShardIterator or DescribeStreamSummary answer
        (whole seconds), if any."""

    def call(self, what: str, fn: Callable[..., T], **kwargs: Any) -> T:
        """``fn(**kwargs)``, counted, with botocore errors translated (``what`` names
        the call in messages)."""
        return self._call(what, fn, **kwargs)

    def _call(self, what: str, fn: Callable[..., T], **kwargs: Any) -> T:
        self.calls += 1
        try:
            return fn(**kwargs)
        except Exception as exc:
            translated = translate(exc, what)
            if translated is exc:
                raise
            raise translated from exc

    @property
    def stream_ref(self) -> dict[str, str]:
        """How a call names the stream: ``StreamARN`` if given, else ``StreamName``."""
        if self.stream_arn is not None:
            return {"StreamARN": self.stream_arn}
        return {"StreamName": self.stream_name}

    def check_stream(self) -> str:
        """The stream's status; :class:`StreamNotFoundError` if it does not exist.

        Also sets ``server_time`` from the answer's ``Date`` header, and ``created``."""
        try:
            resp = self._call(
                f"DescribeStreamSummary {self.stream_name}",
                self.client.describe_stream_summary,
                **self.stream_ref,
            )
        except StreamNotFoundError:
            named = self.stream_arn or self.stream_name
            raise StreamNotFoundError(
                f"stream {named!r} not found at {self.client.meta.endpoint_url} "
                f"(region {self.client.meta.region_name})"
            ) from None
        self.server_time = _server_date(resp)
        summary = resp["StreamDescriptionSummary"]
        created = summary.get("StreamCreationTimestamp")
        self.created = created if isinstance(created, datetime) else None
        return str(summary["StreamStatus"])

    def check_identity(self) -> None:
        """The stream is still the one ``created`` was read of: :class:`StreamNotFoundError`
        if it is gone, :class:`StreamRecreatedError` if it was created again since (its
        shard ids and sequence numbers start over: reading on would mix two streams under
        one set of checkpoints). ``created`` keeps the old stream's time."""
        before = self.created
        self.check_stream()
        if before is not None and self.created is not None and self.created != before:
            created, self.created = self.created, before
            raise StreamRecreatedError(
                f"stream {self.stream_name!r} was deleted and created again (at "
                f"{created.isoformat()}; read since {before.isoformat()}): it is another "
                "stream, not read on with this one's checkpoints"
            )

    def list_shards(self, page_size: int | None = None) -> list[ShardInfo]:
        """Every shard of the stream (open and closed), following pagination.

        ``page_size`` sets ``MaxResults`` (tests use it to force several pages).
        """
        shards: list[ShardInfo] = []
        kwargs: dict[str, Any] = dict(self.stream_ref)
        if page_size is not None:
            kwargs["MaxResults"] = page_size
        while True:
            try:
                resp = self._call(
                    f"ListShards {self.stream_name}", self.client.list_shards, **kwargs
                )
            except KinesisError as exc:
                # moto needs StreamName next to NextToken; real Kinesis rejects that.
                if (
                    not exc.retriable
                    and "NextToken" in kwargs
                    and len(kwargs) == 1 + ("MaxResults" in kwargs)
                ):
                    self._token_needs_stream = True
                    kwargs.update(self.stream_ref)
                    continue
                raise
            shards.extend(_shard_info(s) for s in resp.get("Shards", []))
            token = resp.get("NextToken")
            if not token:
                return shards
            kwargs = {"NextToken": token}
            if self._token_needs_stream:
                kwargs.update(self.stream_ref)
            if page_size is not None:
                kwargs["MaxResults"] = page_size

    def shard_iterator(
        self,
        shard_id: str,
        *,
        after_sequence: str | None = None,
        at_sequence: str | None = None,
        position: InitialPosition = InitialPosition.TRIM_HORIZON,
        timestamp: datetime | None = None,
    ) -> str:
        """GetShardIterator: after/at a sequence number, else ``position``."""
        kwargs: dict[str, Any] = {**self.stream_ref, "ShardId": shard_id}
        if after_sequence is not None:
            kwargs.update(
                ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=after_sequence
            )
        elif at_sequence is not None:
            kwargs.update(
                ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=at_sequence
            )
        elif position is InitialPosition.AT_TIMESTAMP:
            kwargs.update(ShardIteratorType="AT_TIMESTAMP", Timestamp=timestamp)
        else:
            kwargs.update(ShardIteratorType=position.value)
        resp = self._call(
            f"GetShardIterator {self.stream_name}/{shard_id}",
            self.client.get_shard_iterator,
            **kwargs,
        )
        self.server_time = _server_date(resp)
        return str(resp["ShardIterator"])

    def get_records(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
        """GetRecords once; KPL aggregates are de-aggregated."""
        resp = self._call(
            f"GetRecords {self.stream_name}/{shard_id}",
            self.client.get_records,
            ShardIterator=iterator,
            Limit=limit,
            **({"StreamARN": self.stream_arn} if self.stream_arn is not None else {}),
        )
        behind = resp.get("MillisBehindLatest")
        raw = resp.get("Records", [])
        counts = AggregateCounts()
        records = to_records(self.stream_name, shard_id, raw, behind, counts=counts)
        children = tuple(_child_info(c, shard_id) for c in resp.get("ChildShards", []) or [])
        if counts.corrupt:
            log.warning(
                "%s: %d record(s) with the KPL magic but a bad checksum or body, handed on whole",
                shard_id,
                counts.corrupt,
            )
        return GetRecordsResult(
            records=records,
            next_iterator=resp.get("NextShardIterator"),
            millis_behind_latest=behind,
            child_shards=children,
            raw_count=len(raw),
            skipped=tuple(counts.skipped),
            corrupt_aggregates=counts.corrupt,
        )


def to_records(
    stream: str,
    shard_id: str,
    raw: list[dict[str, Any]],
    behind: int | None = None,
    *,
    counts: AggregateCounts | None = None,
) -> list[Record]:
    """Value objects for the ``Records`` of a GetRecords answer.

    A KPL aggregate with no user record yields nothing (its key goes to
    ``counts.skipped``); one with the magic but a bad checksum or body is one
    plain record (counted in ``counts.corrupt``).
    """
    out: list[Record] = []
    append = out.append
    for r in raw:
        seq = r["SequenceNumber"]
        data = r["Data"]
        pk = r["PartitionKey"]
        arrival = r.get("ApproximateArrivalTimestamp")
        seq_int = int(seq)
        if data[:4] == MAGIC:
            parts = deaggregate(data, pk)
            if not parts:
                if counts is not None:
                    counts.skipped.append(SequenceKey(seq_int, 0))
                continue
            if len(parts) == 1 and parts[0][1] is data:
                if counts is not None:
                    counts.corrupt += 1
            else:
                for i, (upk, udata) in enumerate(parts):
                    append(
                        Record(
                            stream,
                            shard_id,
                            seq,
                            i,
                            upk,
                            udata,
                            arrival,
                            SequenceKey(seq_int, i),
                            1,
                            behind,
                        )
                    )
                continue
        append(
            Record(stream, shard_id, seq, 0, pk, data, arrival, SequenceKey(seq_int, 0), 1, behind)
        )
    return out


def _server_date(resp: dict[str, Any]) -> datetime | None:
    """The server's clock from an answer's ``Date`` header (None if absent or bad)."""
    headers = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {}) or {}
    value = headers.get("date")
    if not value:
        return None
    try:
        return parsedate_to_datetime(str(value))
    except (TypeError, ValueError):
        return None


def _shard_info(s: dict[str, Any]) -> ShardInfo:
    rng = s.get("SequenceNumberRange", {})
    return ShardInfo(
        shard_id=s["ShardId"],
        parent_shard_id=s.get("ParentShardId"),
        adjacent_parent_shard_id=s.get("AdjacentParentShardId"),
        starting_sequence_number=rng.get("StartingSequenceNumber"),
        ending_sequence_number=rng.get("EndingSequenceNumber"),
    )


def _child_info(c: dict[str, Any], reported_by: str) -> ShardInfo:
    parents = [p for p in c.get("ParentShards", []) if p]
    return ShardInfo(
        shard_id=c["ShardId"],
        parent_shard_id=parents[0] if parents else reported_by,
        adjacent_parent_shard_id=parents[1] if len(parents) > 1 else None,
    )
