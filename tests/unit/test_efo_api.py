"""Enhanced fan-out adapter logic without a server: event translation, the fast event
parser (same result as botocore's), error translation, consumer registration states,
and the configuration of ``consumer``."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError
from kit import FakeClock

from kinesis_spout.config import SpoutConfig
from kinesis_spout.errors import ConfigError, ResourceInUseError, ThrottledError
from kinesis_spout.kinesis.api import translate
from kinesis_spout.kinesis.client import _FastEvents, make_client
from kinesis_spout.kinesis.consumer import ConsumerNotReadyError, ensure_consumer
from kinesis_spout.kinesis.efo_api import Consumer, StartingPosition, _event
from kinesis_spout.streaming.options import parse_options

MAGIC = b"\xf3\x89\x9a\xc2"


def raw_event(records: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    body = {"Records": records, "ContinuationSequenceNumber": "30", "MillisBehindLatest": 7}
    body.update(extra)
    return body


def test_an_event_is_translated_like_a_getrecords_page() -> None:
    from aws_kinesis_agg.aggregator import RecordAggregator

    agg = RecordAggregator()
    for u in ("a", "b", "c"):
        agg.add_user_record(f"pk-{u}", u.encode())
    pk, _, blob = agg.clear_and_get().get_contents()
    recs = [
        {"SequenceNumber": "10", "Data": b"plain", "PartitionKey": "p"},
        {"SequenceNumber": "20", "Data": blob, "PartitionKey": pk},
    ]
    ev = _event("s", "shard-1", raw_event(recs))
    assert [(r.sequence_number, r.sub_sequence_number) for r in ev.records] == [
        ("10", 0),
        ("20", 0),
        ("20", 1),
        ("20", 2),
    ]
    assert [r.partition_key for r in ev.records[1:]] == ["pk-a", "pk-b", "pk-c"]
    assert (ev.continuation, ev.millis_behind_latest, ev.raw_count) == ("30", 7, 2)
    assert ev.last_sequence == "20" and not ev.ended and ev.child_shards == ()
    last = _event(
        "s",
        "shard-1",
        raw_event(
            [],
            ContinuationSequenceNumber=None,
            ChildShards=[
                {
                    "ShardId": "shard-2",
                    "ParentShards": ["shard-1"],
                    "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "9"},
                }
            ],
        ),
    )
    assert last.ended and [c.shard_id for c in last.child_shards] == ["shard-2"]
    assert last.child_shards[0].parent_shard_id == "shard-1"


def test_the_fast_event_parser_gives_what_botocore_gives() -> None:
    client = make_client("http://127.0.0.1:9", "us-east-1")
    model = client.meta.service_model.operation_model("SubscribeToShard")
    shape = model.output_shape.members["EventStream"]
    records = [
        {
            "SequenceNumber": "4968",
            "Data": base64.b64encode(b"\x00payload").decode(),
            "PartitionKey": "pk",
            "ApproximateArrivalTimestamp": 1764000000.123,
            "EncryptionType": "NONE",
        },
    ]
    children = [
        {
            "ShardId": "s2",
            "ParentShards": ["s1"],
            "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "1"},
        }
    ]
    body = json.dumps(
        {
            "Records": records,
            "ContinuationSequenceNumber": "4968",
            "MillisBehindLatest": 0,
            "ChildShards": children,
        }
    ).encode()
    headers = {
        ":message-type": "event",
        ":event-type": "SubscribeToShardEvent",
        ":content-type": "application/json",
    }
    response = {"status_code": 200, "headers": headers, "body": body}
    fast = _FastEvents(_botocore_event_parser())
    assert fast.parse(dict(response), shape) == _botocore_event_parser().parse(
        dict(response), shape
    )
    got = fast.parse(dict(response), shape)["SubscribeToShardEvent"]["Records"][0]
    assert got["Data"] == b"\x00payload" and got["ApproximateArrivalTimestamp"].tzinfo
    # the client's own parser uses the fast one
    parser = client._endpoint._response_parser_factory.create_parser("json")
    assert isinstance(parser._parser._event_stream_parser, _FastEvents)


def _botocore_event_parser() -> Any:
    from botocore.parsers import EventStreamJSONParser

    from kinesis_spout.kinesis.client import utc_timestamp

    return EventStreamJSONParser(timestamp_parser=utc_timestamp)


@pytest.mark.parametrize(
    ("code", "kind"),
    [("ResourceInUseException", ResourceInUseError), ("LimitExceededException", ThrottledError)],
)
def test_subscription_refusals_are_retriable(code: str, kind: type[Exception]) -> None:
    exc = ClientError({"Error": {"Code": code, "Message": "m"}}, "SubscribeToShard")
    out = translate(exc, "SubscribeToShard s/shard-1")
    assert type(out) is kind and getattr(out, "retriable", False)


def test_starting_positions_as_requests() -> None:
    assert StartingPosition("LATEST").as_request() == {"Type": "LATEST"}
    assert StartingPosition("AFTER_SEQUENCE_NUMBER", "5").as_request() == {
        "Type": "AFTER_SEQUENCE_NUMBER",
        "SequenceNumber": "5",
    }


class FakeConsumers:
    """DescribeStreamConsumer answers in order (None: absent); register may race."""

    stream_name = "s"

    def __init__(self, states: list[str | None], register: Callable[[], Consumer] | None = None):
        self.states = states
        self.registered = 0
        self._register = register

    def describe_consumer(self, name: str) -> Consumer | None:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return None if state is None else Consumer(name, "arn:c", state, "arn:s")

    def register_consumer(self, name: str) -> Consumer:
        self.registered += 1
        if self._register is not None:
            return self._register()
        return Consumer(name, "arn:c", "CREATING", "arn:s")


def test_a_consumer_is_registered_then_waited_for() -> None:
    fake = FakeConsumers([None, "CREATING", "CREATING", "ACTIVE"])
    sleeps: list[float] = []
    got = ensure_consumer(fake, "c", sleep=sleeps.append)  # type: ignore[arg-type]
    assert got.status == "ACTIVE" and fake.registered == 1 and len(sleeps) == 3


def test_a_lost_registration_race_and_a_deleting_consumer() -> None:
    def lost() -> Consumer:
        raise ResourceInUseError("Consumer c exists")

    fake = FakeConsumers([None, "ACTIVE"], register=lost)
    assert ensure_consumer(fake, "c", sleep=lambda s: None).status == "ACTIVE"  # type: ignore[arg-type]
    fake = FakeConsumers(["DELETING", None, "ACTIVE"])
    assert ensure_consumer(fake, "c", sleep=lambda s: None).arn == "arn:c"  # type: ignore[arg-type]
    assert fake.registered == 1  # registered again once the old one was gone


def test_a_consumer_that_never_becomes_active_is_an_error() -> None:
    clock = FakeClock(sleep_cost=0.1)
    fake = FakeConsumers(["CREATING"])
    with pytest.raises(ConsumerNotReadyError, match="not ACTIVE after 5s"):
        ensure_consumer(
            fake,
            "c",
            timeout=5,
            sleep=clock.sleep,
            clock=clock,
        )


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"consumer": "fanout"}, "consumer"),
        ({"consumer": "efo", "consumer_name": "has space"}, "consumer_name"),
        ({"consumer": "efo", "job_name": "job:1"}, "consumer_name"),
        ({"subscription_renewal": 301.0}, "subscription_renewal"),
        ({"subscription_renewal": 0.0}, "subscription_renewal"),
    ],
)
def test_bad_consumer_settings_name_the_field(values: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        SpoutConfig(**values)
    assert info.value.field == field


def test_the_consumer_name_defaults_to_the_job_name() -> None:
    cfg = SpoutConfig(job_name="billing", consumer="efo")
    assert cfg.efo_consumer_name == "billing"
    assert SpoutConfig(job_name="job:1").consumer == "polling"  # fine while polling
    assert SpoutConfig(consumer="efo", consumer_name="x").efo_consumer_name == "x"


def test_source_options_of_the_consumer() -> None:
    base = {"streamName": "orders", "checkpointStore": "file:///tmp/x"}
    opts = parse_options({**base, "consumer": "EFO"}, env={})
    assert (opts.consumer, opts.consumer_name) == ("efo", "spark-orders")
    opts = parse_options({**base, "consumer": "efo", "consumerName": "c1"}, env={})
    assert opts.consumer_name == "c1"
    with pytest.raises(ConfigError, match="consumer="):
        parse_options({**base, "consumer": "push"}, env={})
    with pytest.raises(ConfigError, match="consumerName"):
        parse_options({**base, "consumer": "efo", "consumerName": "a b"}, env={})


def test_the_linear_buffer_frames_messages_as_botocore_does() -> None:
    import binascii
    import random
    import struct

    from botocore.eventstream import EventStreamBuffer

    from kinesis_spout.kinesis.client import _LinearBuffer

    def message(payload: bytes) -> bytes:
        name = b":event-type"
        headers = bytes([len(name)]) + name + b"\x07" + struct.pack(">H", 5) + b"Event"
        total = 12 + len(headers) + len(payload) + 4
        prelude = struct.pack(">II", total, len(headers))
        head = prelude + struct.pack(">I", binascii.crc32(prelude))
        body = head + headers + payload
        return body + struct.pack(">I", binascii.crc32(body))

    rng = random.Random(4)
    stream = b"".join(message(bytes(rng.randrange(256) for _ in range(n))) for n in (0, 5, 300, 70))
    for size in (1, 7, 100, len(stream)):
        ours, theirs = _LinearBuffer(), EventStreamBuffer()
        got: list[Any] = []
        want: list[Any] = []
        for i in range(0, len(stream), size):
            ours.add_data(stream[i : i + size])
            theirs.add_data(stream[i : i + size])
            got += [(m.headers, bytes(m.payload)) for m in ours]
            want += [(m.headers, m.payload) for m in theirs]
        assert got == want and len(got) == 4
