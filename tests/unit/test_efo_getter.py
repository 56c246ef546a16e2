"""The enhanced fan-out getter and its subscription thread against a scripted fake of
:class:`FanOutApi` (pure logic: positions, cuts, renewal, ends, errors, back-pressure)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from kinesis_spout.config import InitialPosition
from kinesis_spout.errors import (
    CredentialsError,
    KinesisError,
    ResourceInUseError,
    TransientKinesisError,
)
from kinesis_spout.kinesis.api import to_records
from kinesis_spout.kinesis.efo_api import StartingPosition, SubscriptionEvent
from kinesis_spout.kinesis.efo_getter import EfoShardGetter
from kinesis_spout.kinesis.subscription import FIRST_TRIES, past, starting_position
from kinesis_spout.records import GetterPosition, ShardInfo
from tracker import NoBackoff, SequenceKey

SHARD = "shardId-000000000000"


def event(
    *seqs: int,
    subs: dict[int, int] | None = None,
    continuation: str | None = "auto",
    behind: int = 0,
    children: tuple[str, ...] = (),
) -> SubscriptionEvent:
    """An event with records ``seqs`` (``subs[seq]`` user records in a KPL aggregate)."""
    raw = [{"SequenceNumber": str(s), "Data": b"d%d" % s, "PartitionKey": "pk"} for s in seqs]
    records = []
    for r in to_records("s", SHARD, raw, behind):
        n = (subs or {}).get(int(r.sequence_number), 0)
        if n:
            records += [
                type(r)(
                    r.stream_name,
                    SHARD,
                    r.sequence_number,
                    i,
                    "pk",
                    b"u",
                    None,
                    SequenceKey(int(r.sequence_number), i),
                    1,
                    behind,
                )
                for i in range(n)
            ]
        else:
            records.append(r)
    cont = (str(seqs[-1]) if seqs else "5") if continuation == "auto" else continuation
    kids = tuple(ShardInfo(c, SHARD) for c in children)
    return SubscriptionEvent(
        records,
        cont,
        behind,
        kids,
        ended=bool(kids) or cont is None,
        raw_count=len(seqs),
        last_sequence=str(seqs[-1]) if seqs else None,
    )


class FakeSubscription:
    def __init__(self, items: list[Any], server_time: datetime | None = None) -> None:
        self.items = items
        self.server_time = server_time
        self.closed = threading.Event()

    def events(self) -> Iterator[SubscriptionEvent]:
        for item in self.items:
            if self.closed.is_set():
                return
            if isinstance(item, Exception):
                raise item
            if item == "hang":  # an open subscription with nothing to say yet
                self.closed.wait(30)
                return
            yield item

    def close(self) -> None:
        self.closed.set()


class FakeFanOut:
    """Each ``subscribe`` takes the next script: an exception to raise, or the items of
    a subscription (events, then maybe an exception or ``"hang"``)."""

    def __init__(self, *scripts: Any, probes: list[SubscriptionEvent] | None = None) -> None:
        self.scripts = list(scripts)
        self.starts: list[StartingPosition] = []
        self.probes = list(probes or [])
        self.probed: list[StartingPosition] = []
        self.subs: list[FakeSubscription] = []
        self.api = SimpleNamespace(client=SimpleNamespace(meta=SimpleNamespace(endpoint_url="x")))

    def subscribe(self, arn: str, shard_id: str, start: StartingPosition) -> FakeSubscription:
        self.starts.append(start)
        script = self.scripts.pop(0) if self.scripts else ["hang"]
        if isinstance(script, Exception):
            raise script
        sub = FakeSubscription(script, datetime(2026, 1, 1, 12, tzinfo=UTC))
        self.subs.append(sub)
        return sub

    def probe(self, shard_id: str, start: StartingPosition, limit: int) -> SubscriptionEvent:
        self.probed.append(start)
        return self.probes.pop(0) if self.probes else event()


def getter(fanout: FakeFanOut, **kwargs: Any) -> EfoShardGetter:
    kwargs.setdefault("backoff", NoBackoff())
    return EfoShardGetter(fanout, "arn", SHARD, poll_interval=0.0, **kwargs)  # type: ignore[arg-type]


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def drain(g: EfoShardGetter, until: Callable[[list[Any]], bool], timeout: float = 10) -> list[Any]:
    out: list[Any] = []
    batches = []
    deadline = time.monotonic() + timeout
    while not until(out):
        assert time.monotonic() < deadline, f"got {[r.key for r in out]}"
        b = g.poll(time.monotonic())
        batches.append(b)
        out += b.records
        if not b.records:
            time.sleep(0.005)
    return out


def efo_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("kinesis-efo-")]


# --------------------------------------------------------------------------- positions


def test_resume_position_follows_records_and_anchored_continuations() -> None:
    r = GetterPosition()
    assert starting_position(r) == StartingPosition("TRIM_HORIZON")
    # LocalStack's continuation of an empty start is "0": without an anchor it is ignored
    assert past(r, event(continuation="0")) == r
    r = past(r, event(10, 20))
    assert starting_position(r) == StartingPosition("AFTER_SEQUENCE_NUMBER", "20")
    r = past(r, event(continuation="35"))  # an empty stretch: continue after it
    assert r.after == SequenceKey(35, 0) and r.after_whole
    assert past(r, event(continuation="30")).after == SequenceKey(35, 0)  # never backwards
    at = GetterPosition(after=SequenceKey(7, 2), after_whole=False)
    assert starting_position(at) == StartingPosition("AT_SEQUENCE_NUMBER", "7")
    assert past(at, event(continuation="9")) == GetterPosition(after=SequenceKey(9, 0))
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    stamped = GetterPosition(initial=InitialPosition.AT_TIMESTAMP, timestamp=ts)
    assert starting_position(stamped) == StartingPosition("AT_TIMESTAMP", timestamp=ts)


def test_a_checkpoint_inside_an_aggregate_resumes_at_it_and_drops_what_was_done() -> None:
    fanout = FakeFanOut([event(10, 20, subs={10: 4}), "hang"])
    g = getter(fanout, start=SequenceKey(10, 1))
    got = drain(g, lambda out: len(out) >= 3)
    assert fanout.starts[0] == StartingPosition("AT_SEQUENCE_NUMBER", "10")
    assert [r.key for r in got] == [SequenceKey(10, 2), SequenceKey(10, 3), SequenceKey(20, 0)]
    g.close()
    assert efo_threads() == []


# --------------------------------------------------------------------------- cuts


def test_a_poll_takes_at_most_limit_records_and_keeps_the_rest() -> None:
    fanout = FakeFanOut([event(10, 20, 30, subs={20: 3}), "hang"])
    g = getter(fanout, limit=2)
    first = drain(g, lambda out: len(out) >= 2)
    assert [r.key for r in first] == [SequenceKey(10, 0), SequenceKey(20, 0)]
    assert g.position.after == SequenceKey(20, 0) and g.position.after_whole is False
    assert g.position.iterator is None
    b = g.poll(time.monotonic())  # the rest of the same event
    assert [r.key for r in b.records] == [SequenceKey(20, 1), SequenceKey(20, 2)]
    assert g.position.after_whole is True and b.aggregates == (20,)
    b = g.poll(time.monotonic())
    assert [r.key for r in b.records] == [SequenceKey(30, 0)]
    assert g.at_tip and not g.buffered
    g.close()


def test_records_up_to_the_start_are_dropped() -> None:
    fanout = FakeFanOut([event(10, 20, 30), "hang"])
    g = getter(fanout, start=SequenceKey(20, 0))
    assert [r.key.sequence for r in drain(g, lambda out: len(out) >= 1)] == [30]
    g.close()


# --------------------------------------------------------------------------- renewal and ends


def test_renewal_and_a_dropped_connection_resume_after_the_last_record() -> None:
    dropped = TransientKinesisError("SubscribeToShard: connection dropped")
    fanout = FakeFanOut(
        [event(10, 20), dropped],
        ResourceInUseError("another subscription is active"),
        [event(30), event(continuation="45")],  # Kinesis ends it after an idle event
        [event(50), "hang"],
        probes=[event()],  # the probe after the idle end: still open, nothing new
    )
    g = getter(fanout)
    got = drain(g, lambda out: len(out) >= 4)
    assert [r.key.sequence for r in got] == [10, 20, 30, 50]
    assert fanout.starts == [
        StartingPosition("TRIM_HORIZON"),
        StartingPosition("AFTER_SEQUENCE_NUMBER", "20"),  # refused: in use
        StartingPosition("AFTER_SEQUENCE_NUMBER", "20"),
        StartingPosition("AFTER_SEQUENCE_NUMBER", "45"),  # after the anchored continuation
    ]
    assert fanout.probed == [StartingPosition("AFTER_SEQUENCE_NUMBER", "45")]
    assert g.pump.errors == 2 and g.pump.subscriptions == 3
    g.close()
    assert efo_threads() == []


def test_child_shards_in_the_last_event_end_the_shard_and_the_thread() -> None:
    fanout = FakeFanOut([event(10), event(20, continuation=None, children=("c1", "c2"))])
    g = getter(fanout)
    seen = []
    deadline = time.monotonic() + 10
    while not g.ended:
        assert time.monotonic() < deadline
        seen.append(g.poll(time.monotonic()))
    last = seen[-1]
    assert last.ended and [c.shard_id for c in last.child_shards] == ["c1", "c2"]
    assert [r.key.sequence for b in seen for r in b.records] == [10, 20]
    assert g.next_poll_at == float("inf") and g.poll(time.monotonic()).ended
    wait_for(lambda: efo_threads() == [])


def test_an_early_idle_end_is_probed_and_a_closed_shard_found() -> None:
    closed = SubscriptionEvent([], None, 0, (ShardInfo("c1", SHARD),), ended=True)
    fanout = FakeFanOut([event(10), event()], probes=[closed])
    g = getter(fanout)
    out = drain(g, lambda out: g.ended)
    assert [r.key.sequence for r in out] == [10]
    assert fanout.probed == [StartingPosition("AFTER_SEQUENCE_NUMBER", "10")]
    wait_for(lambda: efo_threads() == [])


def test_a_closed_hint_probes_at_the_first_idle_event() -> None:
    closed = SubscriptionEvent([], None, 0, (), ended=True)
    fanout = FakeFanOut([event(10), event(), "hang"], probes=[closed])
    g = getter(fanout, closed_hint=True)
    drain(g, lambda out: g.ended)
    assert len(fanout.starts) == 1 and len(fanout.probed) == 1
    wait_for(lambda: efo_threads() == [])


def test_latest_renews_at_the_first_subscription_time_until_a_record_came() -> None:
    fanout = FakeFanOut([event(continuation="0"), TransientKinesisError("dropped")], ["hang"])
    g = getter(fanout, position=InitialPosition.LATEST)
    g.open_now()  # subscribes in the caller's thread
    assert fanout.starts[0] == StartingPosition("LATEST")
    wait_for(lambda: len(fanout.starts) == 2)
    opened = datetime(2026, 1, 1, 12, tzinfo=UTC) - timedelta(seconds=1)
    assert fanout.starts[1] == StartingPosition("AT_TIMESTAMP", timestamp=opened)
    g.close()


# --------------------------------------------------------------------------- errors


def test_retriable_errors_are_reported_once_and_fatal_ones_raised() -> None:
    fanout = FakeFanOut(ResourceInUseError("in use"), CredentialsError("rejected"))
    g = getter(fanout)
    first = g.poll(time.monotonic())  # starts the thread (first poll)
    wait_for(lambda: g.pump.error is not None)
    notices = [first.error, g.pump.take_notice(), g.pump.take_notice()]
    assert [type(n) for n in notices if n is not None] == [ResourceInUseError]  # once
    with pytest.raises(CredentialsError):
        g.poll(time.monotonic())
    assert g.next_poll_at == float("-inf")  # due: the next poll raises it again
    g.close()


def test_an_endpoint_without_subscriptions_is_a_clear_error() -> None:
    fanout = FakeFanOut(*[TransientKinesisError("500: <html>")] * FIRST_TRIES)
    g = getter(fanout)
    g.poll(time.monotonic())
    wait_for(lambda: g.pump.error is not None)
    with pytest.raises(KinesisError, match="support enhanced fan-out.*polling"):
        g.poll(time.monotonic())
    assert len(fanout.starts) == FIRST_TRIES
    g.close()


# --------------------------------------------------------------------------- back-pressure


def test_the_thread_waits_while_the_buffer_is_full_and_close_stops_it() -> None:
    fanout = FakeFanOut([event(i) for i in range(10, 200, 10)] + ["hang"])
    g = getter(fanout, capacity=2)
    g.poll(time.monotonic())  # starts the thread; takes what is there (at most 2 events)
    wait_for(lambda: len(g.pump) == 2)
    time.sleep(0.2)
    assert len(g.pump) == 2 and g.pump.events <= 4  # nothing read past the buffer
    held = g.pump.events
    b = g.poll(time.monotonic())
    assert b.records  # taking frees room: it reads on
    wait_for(lambda: g.pump.events > held)
    g.close()
    assert efo_threads() == [] and fanout.subs[0].closed.is_set()
    # a poll after close subscribes again after the last event received
    resume = g.pump.resume.after
    received = resume.sequence if resume is not None else 0
    g.poll(time.monotonic())
    wait_for(lambda: len(fanout.starts) == 2)
    assert fanout.starts[1] == StartingPosition("AFTER_SEQUENCE_NUMBER", str(received))
    g.close()
    assert efo_threads() == []


def test_a_thread_that_outlives_its_stop_is_not_doubled_by_the_next_poll() -> None:
    release = threading.Event()

    class SlowFanOut(FakeFanOut):
        def subscribe(self, arn: str, shard_id: str, start: StartingPosition) -> FakeSubscription:
            release.wait(30)  # a SubscribeToShard call still waiting for its answer
            return super().subscribe(arn, shard_id, start)

    fanout = SlowFanOut([event(10), "hang"], [event(10), event(20), "hang"])
    g = getter(fanout)
    g.poll(time.monotonic())  # starts the thread, which blocks in its call
    wait_for(lambda: len(efo_threads()) == 1)
    g.pump.stop(timeout=0.05)  # the join gives up: the call cannot be interrupted
    g.poll(time.monotonic())  # no second thread beside the one still stopping
    assert len(efo_threads()) == 1
    release.set()
    wait_for(lambda: efo_threads() == [])  # it sees the stop once its call returns
    got = drain(g, lambda out: len(out) >= 2)  # a later poll subscribes again
    assert [r.key.sequence for r in got] == [10, 20]
    assert fanout.starts == [StartingPosition("TRIM_HORIZON")] * 2
    g.close()
    assert efo_threads() == []


def test_a_skipped_empty_aggregate_is_no_tail_once_records_after_it_are_taken() -> None:
    # Event 1: record 10, then an empty KPL aggregate 15 (skipped); event 2: 20, 30.
    empty = SequenceKey(15, 0)
    first = replace(event(10, continuation="15"), skipped=(empty,), raw_count=2, last_sequence="15")
    fanout = FakeFanOut([first, event(20, 30), "hang"])
    g = getter(fanout, limit=2)
    g.pump.start()
    wait_for(lambda: len(g.pump) == 2)
    b = g.poll(time.monotonic())  # all of event 1, and event 2 cut after its first record
    assert [r.key.sequence for r in b.records] == [10, 20] and b.skipped == 1
    assert b.skipped_tail is None  # record 20 covers it: no tail for the owner to pass
    b = g.poll(time.monotonic())
    assert [r.key.sequence for r in b.records] == [30] and b.skipped_tail is None
    g.close()
    fanout = FakeFanOut([event(5), first, "hang"])
    g = getter(fanout)
    g.pump.start()
    wait_for(lambda: len(g.pump) == 2)
    b = g.poll(time.monotonic())  # after every record taken: the owner passes it itself
    assert [r.key.sequence for r in b.records] == [5, 10] and b.skipped_tail == empty
    assert g.after == empty and g.position.after_whole
    g.close()


class ReadAfterClose:
    """A botocore event stream whose read after ``close`` fails as urllib3's does when
    the response is closed between two reads of a busy stream (an AttributeError)."""

    def __init__(self, *seqs: int) -> None:
        self.seqs = seqs
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for s in self.seqs:
            rec = {"SequenceNumber": str(s), "Data": b"d", "PartitionKey": "pk"}
            yield {
                "SubscribeToShardEvent": {
                    "Records": [rec],
                    "ContinuationSequenceNumber": str(s),
                    "MillisBehindLatest": 0,
                }
            }
        self.closed.wait(30)
        raise AttributeError("'NoneType' object has no attribute 'read'")

    def close(self) -> None:
        self.closed.set()


def test_a_read_that_fails_because_stop_closed_the_stream_is_no_error() -> None:
    from kinesis_spout.kinesis.efo_api import Subscription

    class StreamFanOut(FakeFanOut):
        def subscribe(self, arn: str, shard_id: str, start: StartingPosition) -> Any:
            self.starts.append(start)
            return Subscription("s", shard_id, ReadAfterClose(*self.scripts.pop(0)), None)

    fanout = StreamFanOut((10,), (20,))
    g = getter(fanout)
    assert [r.key.sequence for r in drain(g, lambda out: len(out) >= 1)] == [10]
    g.close()  # deactivate: the thread's read fails on the stream closed under it
    assert efo_threads() == [] and g.pump.error is None
    assert [r.key.sequence for r in drain(g, lambda out: len(out) >= 1)] == [20]
    assert fanout.starts[1] == StartingPosition("AFTER_SEQUENCE_NUMBER", "10")
    g.close()


def test_records_polled_with_a_retriable_error_still_hold_their_aggregate_back() -> None:
    """A poll hands out buffered records together with the error the thread retried
    meanwhile: the spout must still note the batch's KPL aggregate, or a checkpoint at
    its first user record would resume after the whole aggregate and skip the rest."""
    from test_spout import Rig, S

    from kinesis_spout.kinesis.buffered import BufferedShardGetter

    r = Rig(shards=1)
    r.open()
    fanout = FakeFanOut(ResourceInUseError("renewal refused"), [event(10, subs={10: 2}), "hang"])
    g = getter(fanout)
    r.spout.streams.find(None, S[0]).reader = BufferedShardGetter(g)  # type: ignore[union-attr]  # read by subscription
    g.pump.start()
    wait_for(lambda: len(g.pump) == 1)  # refused once, then the event came
    first, second = r.spout.next_batch(10)
    assert (first.key, second.key) == (SequenceKey(10, 0), SequenceKey(10, 1))
    r.spout.ack(first)
    r.spout.checkpoint(force=True)
    assert r.cp(S[0]) is None  # (10, 0) would mean "the whole aggregate is done"
    r.spout.ack(second)
    r.spout.close()
    cp = r.cp(S[0])
    assert cp is not None and (cp.sequence_number, cp.sub_sequence_number) == ("10", 1)
    assert efo_threads() == []
