"""What the shard coordinator drives and decides, apart from ZooKeeper I/O.

:class:`SpoutControl` is the spout as the coordinator sees it;
:func:`plan_leases` is a rebalance's decision as a pure function: from the
lease states this worker has and the shards assigned to it, the new states,
the shards to acquire and the shards to give up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kinesis_spout.coordination.leases import LeaseState


class SpoutControl(Protocol):
    """What the coordinator needs from a spout (``KinesisSpout`` has it)."""

    def set_owned_shards(self, shard_ids: Iterable[str] | None) -> None: ...

    def activate(self) -> None: ...

    def deactivate(self) -> None: ...

    def checkpoint(self, force: bool = False) -> Any: ...

    def drain_shards(self, shard_ids: Iterable[str]) -> None: ...

    def in_flight_of(self, shard_ids: Iterable[str]) -> int: ...


ShardLister = Callable[[], Iterable[str]]
"""Returns the stream's shard ids (e.g. ``ListShards``); may raise KinesisSpoutError."""


def plan_leases(
    states: Mapping[str, LeaseState], mine: Iterable[str]
) -> tuple[dict[str, LeaseState], list[str], list[str]]:
    """``(new states, shards to acquire, shards given up)`` after a rebalance.

    A HELD shard no longer assigned starts RELEASING; a RELEASING one assigned
    back is HELD again; a shard still ACQUIRING and no longer assigned is
    dropped; an assigned shard not held is to be acquired (in sorted order).

    >>> H, R, A = LeaseState.HELD, LeaseState.RELEASING, LeaseState.ACQUIRING
    >>> plan_leases({"s1": H, "s2": H, "s3": A, "s4": R}, ["s1", "s4", "s5"])
    ({'s1': <LeaseState.HELD: 'held'>, 's2': <LeaseState.RELEASING: 'releasing'>, \
's4': <LeaseState.HELD: 'held'>}, ['s5'], ['s2'])
    """
    assigned = set(mine)
    new: dict[str, LeaseState] = {}
    given_up: list[str] = []
    for shard, st in states.items():
        if shard in assigned:
            new[shard] = LeaseState.HELD if st is LeaseState.RELEASING else st
        elif st is LeaseState.HELD:
            new[shard] = LeaseState.RELEASING
            given_up.append(shard)
        elif st is not LeaseState.ACQUIRING:
            new[shard] = st
    to_acquire = [
        s for s in sorted(assigned) if new.get(s, LeaseState.ACQUIRING) is LeaseState.ACQUIRING
    ]
    return new, to_acquire, given_up
