"""Hole 7: during a rebalance only the shards being given up drain; the rest flow on.

The coordinator used to deactivate the whole spout while a shard it gives up
drained, and waited for the spout's *total* in-flight count to reach zero (which
could not happen while the kept shards' retries were blocked too): every
rebalance paused the worker for its whole drain timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from test_coordinator import (  # noqa: F401  (fixtures)
    Worker,
    held,
    make_worker,
    run_until,
    stream,
)

from kinesis_spout.coordination.leases import LeaseState
from kinesis_spout.records import Record
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import emulator_client, make_payloads, put_records

pytestmark = pytest.mark.integration


def test_kept_shards_keep_emitting_while_given_up_shards_drain(
    make_worker: Callable[..., Worker],  # noqa: F811
    moto_server: MotoServer,
    stream: str,  # noqa: F811
) -> None:
    a = make_worker("a", checkpoint_interval=600.0)
    got: list[Record] = []
    first: dict[str, Record] = {}  # the first record of each shard stays in flight
    deadline = time.monotonic() + 30
    while (len(got) < 400 or len(held(a)) < 4) and time.monotonic() < deadline:
        batch = a.step(ack=False)
        got.extend(batch)
        for r in batch:
            first.setdefault(r.shard_id, r)
        a.spout.ack_many(r for r in batch if first[r.shard_id] is not r)
    assert len(got) == 400 and len(first) == 4

    b = make_worker("b", checkpoint_interval=600.0)
    releasing: set[str] = set()
    deadline = time.monotonic() + 20
    while not releasing and time.monotonic() < deadline:
        a.step()
        b.step()
        releasing = {
            s for s, st in a.coordinator.lease_states().items() if st is LeaseState.RELEASING
        }
    assert len(releasing) == 2, a.coordinator.lease_states()
    kept = held(a)
    assert len(kept) == 2

    put_records(emulator_client(moto_server.endpoint_url), stream, make_payloads(80, size=32))
    fresh: list[Record] = []
    deadline = time.monotonic() + 3.0  # well inside the 5 s drain timeout
    while time.monotonic() < deadline:
        fresh.extend(r for r in a.step() if r.shard_id in kept)
        b.step()
        time.sleep(0.01)
    still_releasing = {
        s for s, st in a.coordinator.lease_states().items() if st is LeaseState.RELEASING
    }
    assert still_releasing == releasing  # their last records are still in flight
    assert fresh, "the kept shards emitted nothing while the others drained"

    a.spout.ack_many(first.values())
    run_until(
        lambda: len(held(a)) == 2 and len(held(b)) == 2, [a, b], what="the hand-off completes"
    )
    stored = a.store.load(a.config.stream_name)
    for shard in releasing:
        final = max(r.key for r in got if r.shard_id == shard)
        assert stored[shard].key == final
