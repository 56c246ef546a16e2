"""Closing many getters at once costs one stop timeout, not one per shard.

A subscription thread stuck in an HTTP call outlives its stop; closing the shards
one by one, each join waiting out its full timeout, made closing N stuck shards
take N timeouts (a thousand shards in an outage: hours). Every getter is told to
stop first, then each is joined within what is left of one shared deadline.
"""

from __future__ import annotations

from kit import FakeClock

from kinesis_spout.kinesis.buffered import close_getters


class StuckGetter:
    """A getter whose thread never ends: each join waits out the whole time given."""

    def __init__(self, name: str, log: list[tuple[str, str, float]], clock: FakeClock) -> None:
        self.name, self.log, self.clock = name, log, clock

    def stop_soon(self) -> None:
        self.log.append(("stop_soon", self.name, self.clock()))

    def close(self, timeout: float = 10.0) -> None:
        self.log.append(("close", self.name, timeout))
        self.clock.advance(timeout)  # the join waited it all out


def test_every_getter_is_told_to_stop_before_any_is_joined_within_one_deadline() -> None:
    log: list[tuple[str, str, float]] = []
    clock = FakeClock(100.0)
    getters = [StuckGetter(f"g{i}", log, clock) for i in range(5)]
    close_getters(getters, timeout=10.0, clock=clock)
    kinds = [kind for kind, _, _ in log]
    assert kinds == ["stop_soon"] * 5 + ["close"] * 5
    waited = [t for kind, _, t in log if kind == "close"]
    assert waited[0] == 10.0 and waited[1:] == [0.0] * 4
    assert clock.now - 100.0 == 10.0  # one timeout in all, not five


def test_polling_getters_close_at_once() -> None:
    from kinesis_spout.kinesis.getter import KinesisShardGetter
    from tracker import NoBackoff

    g = KinesisShardGetter(api=None, shard_id="s", backoff=NoBackoff())  # type: ignore[arg-type]
    close_getters([g, g], timeout=0.0)  # nothing to stop: no thread, no error
