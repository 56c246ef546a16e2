"""The one exception to "checkpoints only move forward": an operator's reset.

``kinesis-spout checkpoints reset`` calls a store's ``reset(stream, shard,
checkpoint)``, which writes ``checkpoint`` whatever is stored (backwards too)
and counts it in the checkpoint's ``resets``. Readers never call it. The rule
is "stop the job first": the command holds the job lease while it resets, so
it is refused while a reader runs.

A reader that runs anyway (one that took no job lease, a process paused past
its ZooKeeper session) must not overwrite the reset with its old position:
each store remembers, per shard, the ``resets`` count it saw when it first loaded
the stream (:class:`ResetFence`; a reload mid-run does not change it), and refuses a
later save or shard end over a higher count with
:class:`~kinesis_spout.errors.StaleCheckpointError`, as it does for a shard taken over.
Every normal write carries the stored count on.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from kinesis_spout.errors import StaleCheckpointError
from kinesis_spout.records import Checkpoint

TRIM_HORIZON_PIN = datetime(1970, 1, 1, tzinfo=UTC)
"""The start a reset to TRIM_HORIZON pins: before any record, so the oldest one kept."""


def pinned_start(cp: Checkpoint) -> str:
    """A pinned start as people read it: ``TRIM_HORIZON``, or its time (ISO 8601)."""
    if cp.start_at is None:
        return "?"
    return "TRIM_HORIZON" if cp.start_at == TRIM_HORIZON_PIN else cp.start_at.isoformat()


class ResetFence:
    """The ``resets`` counts one store instance has seen, per (stream, shard)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], int] = {}
        self._loaded: set[str] = set()

    def loaded(self, stream: str, checkpoints: dict[str, Checkpoint]) -> None:
        """``stream`` was loaded: the counts of shards seen for the first time are those
        its reader starts from. A later load (a reshard, a rebalance) keeps the counts
        seen first: the reader's positions of those shards are still the old ones."""
        self._loaded.add(stream)
        for shard, cp in checkpoints.items():
            self._seen.setdefault((stream, shard), cp.resets)

    def carry(self, stored: Checkpoint | None, new: Checkpoint) -> Checkpoint:
        """``new`` with the stored ``resets`` count; :class:`StaleCheckpointError` if an
        operator reset the shard after this store loaded its stream."""
        key = (new.stream_name, new.shard_id)
        if stored is None:
            self._seen.setdefault(key, 0)  # its first checkpoint: no reset before it
            return new
        default = 0 if new.stream_name in self._loaded else stored.resets
        seen = self._seen.setdefault(key, default)
        if stored.resets > seen:
            raise StaleCheckpointError(
                f"checkpoint of {new.stream_name}/{new.shard_id} was reset by an operator "
                "after this reader loaded it: not overwritten; restart the reader to "
                "resume from the reset position"
            )
        return replace(new, resets=stored.resets)


def reset_value(
    stored: Checkpoint | None, new: Checkpoint, job_name: str, owner: str, now: datetime
) -> Checkpoint:
    """What a reset stores: ``new``, one more reset than ``stored``."""
    return replace(
        new,
        job_name=job_name,
        owner=new.owner or owner,
        updated_at=now,
        resets=(stored.resets if stored else 0) + 1,
    )
