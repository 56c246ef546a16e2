"""The read-only views of :class:`~kinesis_spout.spout.KinesisSpout`: state, shards,
stats and metrics (a base class, so the spout's own module keeps to its size)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from kinesis_spout.core.acks import AckRouter
from kinesis_spout.core.committer import Committer
from kinesis_spout.core.rotation import RoundRobin
from kinesis_spout.core.shardset import ShardSet
from kinesis_spout.core.stats import SpoutStats, spout_stats
from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.records import ShardInfo, ShardState


class SpoutView:
    """What a spout shows of itself; the spout sets these parts up."""

    _set: ShardSet
    _rr: RoundRobin
    _acks: AckRouter
    _committer: Committer
    _metrics: MetricsCollector
    _clock: Callable[[], float]
    _opened: bool
    _active: bool

    @property
    def metrics(self) -> MetricsCollector:
        """Where this spout reports (its own endpoint's with ``metrics_port`` and none given)."""
        return self._metrics

    @property
    def in_flight(self) -> int:
        return self._set.in_flight_of(self._set.shards)

    def shard_states(self) -> dict[str, ShardState]:
        """The lifecycle state of every owned shard."""
        return {s: sh.state for s, sh in sorted(self._set.shards.items())}

    @property
    def shards(self) -> Mapping[str, ShardInfo]:
        """Every shard of the stream known to this spout (owned or not)."""
        return MappingProxyType(self._set.map.infos())

    def stats(self) -> SpoutStats:
        return spout_stats(self._set.shards, self._rr, self._acks, self._committer, self._clock())

    @property
    def is_idle(self) -> bool:
        """Nothing in flight or buffered, and every owned shard caught up or ended."""
        return self._opened and all(sh.idle for sh in self._set.shards.values())

    @property
    def is_active(self) -> bool:
        return self._active
