"""The boto3 adapter of enhanced fan-out: consumers and ``SubscribeToShard`` event streams.

Like :mod:`kinesis_spout.kinesis.api` (whose :class:`KinesisApi` it wraps), this is the
only place that sees the boto3 dictionaries of these calls and botocore's event-stream
errors: :class:`FanOutApi` returns value objects (:class:`Consumer`,
:class:`Subscription`, :class:`SubscriptionEvent`) and raises the project's errors
(``ResourceInUseException`` retriable, ``LimitExceededException`` a throttle, a dropped
stream or damaged event transient). An event's records are de-aggregated exactly as a
GetRecords page is (:func:`~kinesis_spout.kinesis.api.to_records`). The errors, and
botocore's HTTP/1.1 for an API documented over HTTP/2: docs/efo.md.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.eventstream import ParserError
from urllib3.exceptions import HTTPError as Urllib3Error

from kinesis_spout.config import InitialPosition
from kinesis_spout.errors import KinesisError, StreamNotFoundError, TransientKinesisError
from kinesis_spout.kinesis.api import (
    AggregateCounts,
    GetRecordsResult,
    KinesisApi,
    _child_info,
    _server_date,
    to_records,
    translate,
)
from kinesis_spout.records import Record, ShardInfo
from tracker import SequenceKey

log = logging.getLogger(__name__)

__all__ = ["Consumer", "FanOutApi", "StartingPosition", "Subscription", "SubscriptionEvent"]


@dataclass(frozen=True, slots=True)
class Consumer:
    """A registered stream consumer (``DescribeStreamConsumer``)."""

    name: str
    arn: str
    status: str
    """``CREATING``, ``ACTIVE`` or ``DELETING``."""
    stream_arn: str


@dataclass(frozen=True, slots=True)
class StartingPosition:
    """Where a subscription starts: ``kind`` is a ``ShardIteratorType``; ``sequence``
    goes with ``AT_``/``AFTER_SEQUENCE_NUMBER``, ``timestamp`` with ``AT_TIMESTAMP``."""

    kind: str
    sequence: str | None = None
    timestamp: datetime | None = None

    def as_request(self) -> dict[str, Any]:
        out: dict[str, Any] = {"Type": self.kind}
        if self.sequence is not None:
            out["SequenceNumber"] = self.sequence
        if self.timestamp is not None:
            out["Timestamp"] = self.timestamp
        return out

    def __str__(self) -> str:
        tail = self.sequence or (self.timestamp.isoformat() if self.timestamp else "")
        return f"{self.kind} {tail}".strip()


@dataclass(frozen=True, slots=True)
class SubscriptionEvent:
    """One ``SubscribeToShardEvent`` (or a GetRecords page standing in for one), de-aggregated."""

    records: list[Record]
    continuation: str | None
    """``ContinuationSequenceNumber``: resume after it (None at the end of a closed shard)."""
    millis_behind_latest: int | None
    child_shards: tuple[ShardInfo, ...] = ()
    ended: bool = False
    """The shard is closed and this is its last event."""
    raw_count: int = 0
    """Kinesis records in the event (before de-aggregation)."""
    last_sequence: str | None = None
    """Sequence number of the event's last Kinesis record (an empty aggregate's too)."""
    skipped: tuple[SequenceKey, ...] = ()
    corrupt_aggregates: int = 0

    @classmethod
    def of_page(cls, page: GetRecordsResult, last_sequence: str | None) -> SubscriptionEvent:
        """A GetRecords page as an event (the probe of a subscription that ended early)."""
        return cls(
            page.records,
            last_sequence,
            page.millis_behind_latest,
            page.child_shards,
            ended=page.next_iterator is None,
            raw_count=page.raw_count,
            last_sequence=last_sequence,
            skipped=page.skipped,
            corrupt_aggregates=page.corrupt_aggregates,
        )


def _event(stream: str, shard_id: str, body: dict[str, Any]) -> SubscriptionEvent:
    raw = body.get("Records") or []
    behind = body.get("MillisBehindLatest")
    counts = AggregateCounts()
    records = to_records(stream, shard_id, raw, behind, counts=counts)
    children = tuple(_child_info(c, shard_id) for c in body.get("ChildShards") or [])
    continuation = body.get("ContinuationSequenceNumber")
    return SubscriptionEvent(
        records,
        continuation,
        behind,
        children,
        ended=bool(children) or continuation is None,
        raw_count=len(raw),
        last_sequence=raw[-1]["SequenceNumber"] if raw else None,
        skipped=tuple(counts.skipped),
        corrupt_aggregates=counts.corrupt,
    )


_DROPPED = (Urllib3Error, http.client.HTTPException, ParserError, OSError)


class Subscription:
    """One open ``SubscribeToShard`` event stream; iterate :meth:`events`, then :meth:`close`.

    :meth:`close` may be called from another thread: it shuts the socket down, so a
    reader blocked in :meth:`events` returns at once.
    """

    def __init__(self, stream: str, shard_id: str, event_stream: Any, started: datetime | None):
        self.stream = stream
        self.shard_id = shard_id
        self._events = event_stream
        self.server_time = started
        """The ``Date`` of the subscription's answer, if given."""
        self.closed = False

    def events(self) -> Iterator[SubscriptionEvent]:
        """The events as they come; ends when Kinesis ends the subscription."""
        what = f"SubscribeToShard {self.stream}/{self.shard_id}"
        it = iter(self._events)
        while True:
            try:
                item = next(it)
            except StopIteration:
                return
            except Exception as exc:
                if self.closed:  # by close() under the read: urllib3 may raise anything
                    return
                if isinstance(exc, _DROPPED):
                    raise TransientKinesisError(f"{what}: connection dropped: {exc!r}") from exc
                translated = translate(exc, what)
                if translated is exc:
                    raise
                raise translated from exc
            body = item.get("SubscribeToShardEvent")
            if body is not None:
                yield _event(self.stream, self.shard_id, body)

    def close(self) -> None:
        """Stop reading and free the connection (idempotent, thread-safe enough)."""
        if self.closed:
            return
        self.closed = True
        raw = getattr(self._events, "_raw_stream", None)
        shutdown = getattr(raw, "shutdown", None)  # urllib3 >= 2.3: wakes a blocked read
        with contextlib.suppress(Exception):
            if shutdown is not None:
                shutdown()
        with contextlib.suppress(Exception):
            self._events.close()


class FanOutApi:
    """Enhanced fan-out calls of one stream, over a :class:`KinesisApi`."""

    def __init__(self, api: KinesisApi) -> None:
        self.api = api
        self._stream_arn: str | None = None

    @property
    def stream_name(self) -> str:
        return self.api.stream_name

    def stream_arn(self) -> str:
        """The stream's ARN (``DescribeStreamSummary``, once)."""
        if self._stream_arn is None and self.api.stream_arn is not None:
            self._stream_arn = self.api.stream_arn
        if self._stream_arn is None:
            client = self.api.client
            try:
                resp = self.api.call(
                    f"DescribeStreamSummary {self.stream_name}",
                    client.describe_stream_summary,
                    StreamName=self.stream_name,
                )
            except StreamNotFoundError:
                raise StreamNotFoundError(
                    f"stream {self.stream_name!r} not found at {client.meta.endpoint_url} "
                    f"(region {client.meta.region_name})"
                ) from None
            self._stream_arn = str(resp["StreamDescriptionSummary"]["StreamARN"])
        return self._stream_arn

    def describe_consumer(self, name: str) -> Consumer | None:
        """The consumer ``name`` of this stream, or None if it is not registered."""
        arn = self.stream_arn()
        try:
            resp = self.api.call(
                f"DescribeStreamConsumer {self.stream_name}/{name}",
                self.api.client.describe_stream_consumer,
                StreamARN=arn,
                ConsumerName=name,
            )
        except StreamNotFoundError:
            return None
        d = resp["ConsumerDescription"]
        return Consumer(d["ConsumerName"], d["ConsumerARN"], d["ConsumerStatus"], arn)

    def register_consumer(self, name: str) -> Consumer:
        """``RegisterStreamConsumer``; :class:`ResourceInUseError` if it exists already."""
        arn = self.stream_arn()
        resp = self.api.call(
            f"RegisterStreamConsumer {self.stream_name}/{name}",
            self.api.client.register_stream_consumer,
            StreamARN=arn,
            ConsumerName=name,
        )
        c = resp["Consumer"]
        return Consumer(c["ConsumerName"], c["ConsumerARN"], c["ConsumerStatus"], arn)

    def deregister_consumer(self, name: str) -> bool:
        """``DeregisterStreamConsumer``; False if it was not registered."""
        try:
            self.api.call(
                f"DeregisterStreamConsumer {self.stream_name}/{name}",
                self.api.client.deregister_stream_consumer,
                StreamARN=self.stream_arn(),
                ConsumerName=name,
            )
        except StreamNotFoundError:
            return False
        return True

    def subscribe(self, consumer_arn: str, shard_id: str, start: StartingPosition) -> Subscription:
        """``SubscribeToShard``: the open event stream (nothing read yet)."""
        what = f"SubscribeToShard {self.stream_name}/{shard_id} at {start}"
        try:
            resp = self.api.call(
                what,
                self.api.client.subscribe_to_shard,
                ConsumerARN=consumer_arn,
                ShardId=shard_id,
                StartingPosition=start.as_request(),
            )
        except _DROPPED as exc:
            raise TransientKinesisError(f"{what}: connection dropped: {exc!r}") from exc
        except KinesisError:
            raise
        return Subscription(self.stream_name, shard_id, resp["EventStream"], _server_date(resp))

    def probe(self, shard_id: str, start: StartingPosition, limit: int) -> SubscriptionEvent:
        """One GetRecords page from ``start`` as an event: whether a shard whose
        subscription ended without ``ChildShards`` is closed (some emulators)."""
        seq = start.sequence
        if start.kind == "AFTER_SEQUENCE_NUMBER":
            it = self.api.shard_iterator(shard_id, after_sequence=seq)
        elif start.kind == "AT_SEQUENCE_NUMBER":
            it = self.api.shard_iterator(shard_id, at_sequence=seq)
        else:
            kind = InitialPosition(start.kind)
            it = self.api.shard_iterator(shard_id, position=kind, timestamp=start.timestamp)
        page = self.api.get_records(shard_id, it, limit)
        last = page.records[-1].sequence_number if page.records else None
        if page.skipped and (last is None or page.skipped[-1].sequence > int(last)):
            last = str(page.skipped[-1].sequence)
        return SubscriptionEvent.of_page(page, last)
