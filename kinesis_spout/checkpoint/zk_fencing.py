"""Fencing of checkpoint writes by shard lease epochs (the ZooKeeper store's side).

A coordinator turns fencing on per stream (:meth:`LeaseFence.require`); from
then on a checkpoint write for a shard must carry the version of the shard's
lease epoch node that this worker got when it acquired the lease
(:meth:`LeaseFence.set`), and the store checks it in the same transaction as
the write. Another worker's acquisition bumps that version, so a zombie's write
is refused with :class:`StaleCheckpointError`. The lease nodes themselves are
:mod:`kinesis_spout.coordination.leases`'.
"""

from __future__ import annotations

import threading

from kinesis_spout.errors import StaleCheckpointError


class LeaseFence:
    """Which streams are fenced, and this worker's lease epoch per shard (thread-safe)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._lock = threading.Lock()
        self._streams: set[str] = set()
        self._epochs: dict[tuple[str, str], int] = {}

    def require(self, stream: str, required: bool = True) -> None:
        with self._lock:
            if required:
                self._streams.add(stream)
            else:
                self._streams.discard(stream)

    def set(self, stream: str, shard: str, epoch: int | None) -> None:
        with self._lock:
            if epoch is None:
                self._epochs.pop((stream, shard), None)
            else:
                self._epochs[(stream, shard)] = epoch

    def epoch(self, stream: str, shard: str) -> int | None:
        with self._lock:
            return self._epochs.get((stream, shard))

    def for_write(self, stream: str, shard: str) -> int | None:
        """The epoch a write must check (None: the stream is not fenced).

        :class:`StaleCheckpointError` if it is fenced and this worker holds no lease.
        """
        with self._lock:
            if stream not in self._streams:
                return None
            epoch = self._epochs.get((stream, shard))
        if epoch is None:
            raise StaleCheckpointError(
                f"worker {self.owner!r} holds no lease on {stream}/{shard}: "
                "checkpoint write refused"
            )
        return epoch


def taken_over(stream: str, shard: str, epoch: int, owner: str) -> StaleCheckpointError:
    """The error of a write whose lease epoch is no longer current."""
    return StaleCheckpointError(
        f"lease on {stream}/{shard} was taken over (epoch {epoch} is stale): "
        f"checkpoint write of worker {owner!r} refused"
    )
