"""A shard getter that keeps one page for its owner: :class:`BufferedShardGetter`.

:class:`ShardGetter` is what every getter offers: the polling
:class:`~kinesis_spout.kinesis.getter.KinesisShardGetter` and the enhanced fan-out
:class:`~kinesis_spout.kinesis.efo_getter.EfoShardGetter`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Protocol

from kinesis_spout.kinesis.getter import NEVER
from kinesis_spout.records import GetterPosition, Record, ShardBatch

__all__ = ["BufferedShardGetter", "ShardGetter", "close_getters"]

#: The longest wait for getters' threads to stop when closing (all of them together).
STOP_TIMEOUT = 10.0


class ShardGetter(Protocol):
    """One shard's reader: ``poll(now)`` never blocks (see :mod:`.getter`)."""

    shard_id: str
    limit: int
    millis_behind_latest: int | None
    calls: int

    @property
    def caught_up(self) -> bool:
        """The last read found nothing new and was not behind: the shard's tip."""

    @property
    def ended(self) -> bool: ...

    @property
    def next_poll_at(self) -> float: ...

    @property
    def position(self) -> GetterPosition: ...

    def due(self, now: float) -> bool: ...

    def poll(self, now: float) -> ShardBatch: ...

    def open_now(self) -> None: ...

    def stop_soon(self) -> None:
        """Tell what the getter runs (a subscription thread) to stop; do not wait."""

    def close(self, timeout: float = STOP_TIMEOUT) -> None:
        """Free what the getter holds (a subscription thread, waited for at most
        ``timeout`` seconds); a later poll reopens."""


class _Stoppable(Protocol):
    def stop_soon(self) -> None: ...

    def close(self, timeout: float = STOP_TIMEOUT) -> None: ...


def close_getters(
    getters: Iterable[_Stoppable],
    timeout: float = STOP_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Close many getters: every one is told to stop first, then each is waited for
    within what is left of one ``timeout``, so N threads stuck in a call cost one
    timeout, not N."""
    getters = list(getters)
    for g in getters:
        g.stop_soon()
    deadline = clock() + timeout
    for g in getters:
        g.close(timeout=max(0.0, deadline - clock()))


class BufferedShardGetter:
    """A :class:`ShardGetter` that keeps one batch.

    ``take(n, now)`` hands out up to ``n`` buffered records and fetches a new
    batch only when the buffer is empty and the getter is due, so a caller
    that takes little (a shard near its in-flight bound) never fetches ahead.
    It calls nothing back: the owner collects the pages fetched (lineage, lag,
    errors; their records are in the buffer) with :meth:`polled` after ``take``.
    """

    __slots__ = ("getter", "_buf", "_pos", "_polled")

    def __init__(self, getter: ShardGetter) -> None:
        self.getter = getter
        self._buf: list[Record] = []
        self._pos = 0
        self._polled: list[ShardBatch] = []

    def polled(self) -> list[ShardBatch]:
        """The pages fetched since the last call, oldest first (their records are
        handed out by ``take``)."""
        out, self._polled = self._polled, []
        return out

    @property
    def shard_id(self) -> str:
        return self.getter.shard_id

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    @property
    def ended(self) -> bool:
        """Closed shard, and every record in it was taken."""
        return self.getter.ended and self._pos >= len(self._buf)

    def ready_at(self) -> float:
        """Clock time at which ``take`` may return something (``-inf``: now)."""
        if self._pos < len(self._buf):
            return -NEVER
        return self.getter.next_poll_at

    def take(self, n: int, now: float) -> list[Record]:
        """Up to ``n`` records, in shard order; ``[]`` if none is ready."""
        buf = self._buf
        pos = self._pos
        if pos >= len(buf):
            if n <= 0 or not self.getter.due(now):
                return []
            batch = self.getter.poll(now)
            buf = self._buf = batch.records
            pos = self._pos = 0
            self._polled.append(batch)
            if not buf:
                return []
        end = pos + n
        out = buf if pos == 0 and end >= len(buf) else buf[pos:end]
        if end >= len(buf):
            self._buf = []
            self._pos = 0
        else:
            self._pos = end
        return out
