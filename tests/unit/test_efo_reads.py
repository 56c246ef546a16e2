"""Bounded enhanced fan-out reads (a Spark read task, a streaming source task) over the
scripted fake of :mod:`test_efo_getter`: limits, the tip, the budget, cutoffs and cuts
inside KPL aggregates, and where the next read starts."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_efo_getter import SHARD, FakeFanOut, event

from kinesis_spout.config import InitialPosition
from kinesis_spout.errors import ResourceInUseError
from kinesis_spout.kinesis import efo_read
from kinesis_spout.kinesis.bounded import read_until
from kinesis_spout.kinesis.efo_api import StartingPosition, SubscriptionEvent
from kinesis_spout.kinesis.efo_read import EfoTarget, subscribed_getter
from kinesis_spout.records import ShardBatch, ShardInfo, ShardPosition, StartPosition
from kinesis_spout.streaming.shard_reader import read_fresh_subscribed
from tracker import SequenceKey

TARGET = EfoTarget("s", "us-east-1", "http://fake", "arn", 0.001, 0.002)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Install a fake :class:`FanOutApi` for :data:`TARGET` (``fake(*scripts)``)."""

    def install(*scripts: Any, probes: list[SubscriptionEvent] | None = None) -> FakeFanOut:
        fanout = FakeFanOut(*scripts, probes=probes)
        monkeypatch.setitem(efo_read._FANOUT, ("http://fake", "us-east-1", "s", None, None), fanout)
        return fanout

    return install


def getter(**kwargs: Any) -> Any:
    values: dict[str, Any] = {
        "start": None,
        "after_whole": True,
        "position": StartPosition().kind,
        "timestamp": None,
        "limit": 100,
        "closed": False,
    }
    values.update(kwargs)
    return subscribed_getter(TARGET, SHARD, **values)


def no_threads() -> bool:
    return not [t for t in threading.enumerate() if t.name.startswith("kinesis-efo-")]


def test_a_task_stops_at_its_limit_and_the_next_starts_inside_the_aggregate(fake: Any) -> None:
    fake([event(10, 20, 30, subs={20: 4}), "hang"])
    g = getter(limit=3)
    taken: list[Any] = []

    def take(b: ShardBatch) -> int:
        taken.extend(b.records)
        return len(b.records)

    end = read_until(g, 3, 5.0, take)
    assert [r.key for r in taken] == [SequenceKey(10), SequenceKey(20, 0), SequenceKey(20, 1)]
    assert g.position.after == SequenceKey(20, 1) and g.position.after_whole is False
    assert not end.caught_up and end.events == 1 and no_threads()
    fanout = fake([event(20, 30, subs={20: 4}), "hang"])
    again = getter(start=g.position.after, after_whole=False, limit=10)
    rest: list[Any] = []
    read_until(again, 10, 5.0, lambda b: rest.extend(b.records) or len(b.records))
    assert fanout.starts[0].kind == "AT_SEQUENCE_NUMBER" and fanout.starts[0].sequence == "20"
    assert [r.key for r in rest] == [SequenceKey(20, 2), SequenceKey(20, 3), SequenceKey(30)]


def test_a_task_stops_at_the_tip_or_when_nothing_came_in_its_budget(fake: Any) -> None:
    fake([event(10, behind=500), event(20, behind=0), event(30)])
    g = getter()
    got: list[Any] = []
    end = read_until(g, 100, 5.0, lambda b: got.extend(b.records) or len(b.records))
    assert [r.key.sequence for r in got] == [10, 20] and end.caught_up  # 30 is left
    fake(["hang"])
    end = read_until(getter(), 100, 0.2, lambda b: len(b.records))
    assert end.caught_up and end.events == 0 and no_threads()  # nothing within the budget


def test_a_subscription_that_did_not_start_in_the_budget_is_not_caught_up(fake: Any) -> None:
    fanout = fake(["hang"])
    slow = threading.Event()
    subscribe = fanout.subscribe

    def slow_subscribe(*args: Any) -> Any:
        slow.wait(1.0)  # an emulator slow to answer SubscribeToShard
        return subscribe(*args)

    fanout.subscribe = slow_subscribe
    end = read_until(getter(), 100, 0.1, lambda b: len(b.records))
    assert not end.caught_up and end.events == 0
    slow.set()


def test_a_refused_subscription_is_reported_not_taken_as_caught_up(fake: Any) -> None:
    fake(*[ResourceInUseError("in use")] * 50)
    end = read_until(getter(), 100, 0.3, lambda b: len(b.records))
    assert not end.caught_up and end.errors and isinstance(end.errors[0], ResourceInUseError)


def test_a_first_read_cut_by_the_cutoff_inside_an_aggregate_is_partial(fake: Any) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    ev = event(10, 20, subs={20: 3})
    stamped = [  # arrived 0, 1, 2, 3 s after t0
        dataclasses.replace(r, approximate_arrival=t0 + timedelta(seconds=i))
        for i, r in enumerate(ev.records)
    ]
    fake([SubscriptionEvent(stamped, "20", 0, raw_count=2, last_sequence="20"), "hang"])
    records, ahead = read_fresh_subscribed(
        TARGET, SHARD, None, StartPosition(), 100, cutoff=t0 + timedelta(seconds=1.5)
    )
    assert [r.key for r in records] == [SequenceKey(10), SequenceKey(20, 0)]
    assert ahead.idle and ahead.position is not None
    assert (ahead.position.sequence, ahead.position.sub_sequence) == ("20", 0)
    assert ahead.position.partial and not ahead.position.ended and ahead.position.count == 2


def test_a_first_read_to_the_end_of_a_closed_shard_names_its_children(fake: Any) -> None:
    last = SubscriptionEvent(
        [], None, 0, (ShardInfo("c1", SHARD), ShardInfo("c2", SHARD)), ended=True
    )
    fake([event(30), last])
    after = ShardPosition("20", 0, False, False, 5)
    records, ahead = read_fresh_subscribed(TARGET, SHARD, after, StartPosition(), 100)
    assert [r.key.sequence for r in records] == [30]
    assert ahead.position is not None and ahead.position.ended
    assert ahead.children == ("c1", "c2") and no_threads()


def test_a_task_that_subscribed_at_latest_hands_on_that_moment_not_latest(fake: Any) -> None:
    # Nothing read: the next task must start where this one did, not at a later LATEST
    # (which would skip what was written between the two tasks).
    fanout = fake([event(continuation="0"), "hang"])
    g = getter(position=InitialPosition.LATEST)
    end = read_until(g, 100, 5.0, lambda b: len(b.records))
    assert end.caught_up and fanout.starts == [StartingPosition("LATEST")]
    opened = datetime(2026, 1, 1, 12, tzinfo=UTC) - timedelta(seconds=1)  # its Date, - 1 s
    pos = g.position
    assert pos.after is None and pos.iterator is None
    assert (pos.initial, pos.timestamp) == (InitialPosition.AT_TIMESTAMP, opened)
    fanout = fake([event(40), "hang"])
    again = getter(start=pos.after, position=pos.initial, timestamp=pos.timestamp)
    read_until(again, 100, 5.0, lambda b: len(b.records))
    assert fanout.starts == [StartingPosition("AT_TIMESTAMP", timestamp=opened)]
    assert again.position.after == SequenceKey(40)
