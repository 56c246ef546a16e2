"""Checkpoint writes of one reader: when a shard's checkpoint may be saved, and how.

One place for every write a reader makes to its
:class:`~kinesis_spout.checkpoint.base.CheckpointStore`:

* :meth:`Committer.save`: the tracker's checkpoint of a shard, if it moved; a
  checkpoint ``(seq, 0)`` of a multi-record KPL aggregate is held back (on
  resume it would read as "the whole record is done");
* :meth:`Committer.mark_ended`: a drained closed shard, so its children start;
* :meth:`Committer.pin_start`: the pinned start of a first open at LATEST or
  AT_TIMESTAMP (see docs/reader.md);
* fencing: a store that refuses a write as stale means another owner is ahead;
  the shard is fenced and stops emitting (the lease layer sorts it out). An
  unreachable store is retried at the next save, counted in
  ``checkpoint_store_errors``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime

from kinesis_spout.checkpoint.base import CheckpointStore
from kinesis_spout.config import InitialPosition, SpoutConfig
from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.errors import (
    CheckpointError,
    CheckpointStoreUnavailableError,
    StaleCheckpointError,
)
from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.records import Checkpoint
from tracker import SequenceKey

log = logging.getLogger(__name__)


class Committer:
    """Checkpoint writes of one reader; see the module docstring.

    ``store`` is set when the reader opens. Counts ``writes`` and remembers when the
    stored checkpoints were last known current (``last_save``, in the reader's clock):
    the open, a write that succeeded, or a round with nothing to write (an idle stream's
    checkpoints do not age).
    """

    def __init__(self, config: SpoutConfig, metrics: MetricsCollector) -> None:
        self.config = config
        self.metrics = metrics
        self.store: CheckpointStore | None = None
        self.last_save: float | None = None
        self.writes = 0
        self.fresh_pins: set[tuple[str, str]] = set()
        """Shards ``(stream, shard)`` whose start this reader pinned at its open (not
        resumed from a pin)."""

    def save(self, part: ShardPartition, now: float) -> bool:
        """Save ``part``'s checkpoint if it moved; False if it could not be (yet)."""
        if part.fenced or part.tracker is None:
            return False
        due = self._due(part)
        if due is None:
            return True
        key, cp = due
        if not self._write(part, lambda store: store.save(cp), "checkpoint"):
            return False
        self._saved(part, key, now)
        return True

    def save_all(
        self,
        parts: Iterable[ShardPartition],
        before: Callable[[ShardPartition], object],
        now: float,
    ) -> None:
        """Save the checkpoint of every partition that moved, in one store call
        (:meth:`~kinesis_spout.checkpoint.base.CheckpointStore.save_many`: the file store
        writes its file once for all of them); ``before`` runs first on each partition
        (the reader flushes its dead letters)."""
        due: list[tuple[ShardPartition, SequenceKey, Checkpoint]] = []
        stuck = False  # a dead letter not yet written holds a checkpoint back
        for part in parts:
            if part.tracker is None:
                continue
            before(part)
            if not part.fenced and (moved := self._due(part)) is not None:
                due.append((part, *moved))
            stuck = stuck or bool(part.dead_pending)
            self.metrics.gauge(
                "in_flight", part.tracker.in_flight, shard=part.shard_id, stream=part.stream
            )
        if not due and not stuck:
            self.last_save = now  # nothing to write: the stored checkpoints are current
        if due:
            assert self.store is not None
            outcomes = self.store.save_many([cp for _, _, cp in due])
            for (part, key, _), out in zip(due, outcomes, strict=True):
                if isinstance(out, CheckpointError):
                    self._failed(part, out, "checkpoint")
                else:
                    self._saved(part, key, now)
        if self.last_save is not None:
            self._age(now - self.last_save)

    def opened(self, parts: Iterable[ShardPartition], now: float) -> None:
        """The reader opened on these shards: their stored checkpoints are current (nothing
        read yet), so the checkpoint age counts from now, and each shard's in-flight
        figure (0) is reported, so both are known from the first scrape."""
        self.last_save = now
        for part in parts:
            if part.tracker is not None:
                self.metrics.gauge(
                    "in_flight", part.tracker.in_flight, shard=part.shard_id, stream=part.stream
                )
        self._age(0.0)

    def _age(self, seconds: float) -> None:
        for stream in self.config.stream_names:
            self.metrics.gauge("checkpoint_age_seconds", seconds, stream=stream)

    def _due(self, part: ShardPartition) -> tuple[SequenceKey, Checkpoint] | None:
        """The checkpoint to write for ``part``: its tracker's, if it moved and may be
        written (a ``(seq, 0)`` inside a multi-record KPL aggregate is held back: on
        resume it would read as "the whole record is done")."""
        assert part.tracker is not None
        key = part.tracker.checkpoint
        if key is None or (part.saved is not None and key <= part.saved):
            return None
        aggregates = part.aggregates
        if aggregates:
            for seq in list(aggregates):
                if seq >= key.sequence:
                    break
                del aggregates[seq]
            if key.sub_sequence == 0 and key.sequence in aggregates:
                return None
        cfg = self.config
        cp = Checkpoint(
            part.stream,
            part.shard_id,
            str(key.sequence),
            key.sub_sequence,
            shard_end=False,
            job_name=cfg.job_name,
            owner=cfg.worker_id,
        )
        return key, cp

    def _saved(self, part: ShardPartition, key: SequenceKey, now: float) -> None:
        part.saved = key
        part.window.trim(key)
        self.last_save = now
        self.writes += 1
        self.metrics.increment("checkpoint_writes", shard=part.shard_id, stream=part.stream)
        log.debug("checkpoint %s/%s at %s", part.stream, part.shard_id, key)

    def mark_ended(self, part: ShardPartition) -> bool:
        """Record that every record of the closed shard is done; False if not (yet)."""
        cfg = self.config
        return self._write(
            part,
            lambda store: store.mark_ended(part.stream, part.shard_id, cfg.worker_id),
            "shard end",
        )

    def _write(
        self, part: ShardPartition, write: Callable[[CheckpointStore], object], what: str
    ) -> bool:
        assert self.store is not None
        try:
            write(self.store)
        except (StaleCheckpointError, CheckpointStoreUnavailableError) as exc:
            self._failed(part, exc, what)
            return False
        return True

    def _failed(self, part: ShardPartition, exc: CheckpointError, what: str) -> None:
        """A write of ``part``'s ``what`` was refused as stale (another owner is ahead: the
        shard is fenced) or the store was unreachable (retried at the next save)."""
        if isinstance(exc, StaleCheckpointError):
            self.fence(part, exc)
        elif isinstance(exc, CheckpointStoreUnavailableError):
            log.warning(
                "%s of %s/%s not saved, will retry: %s", what, part.stream, part.shard_id, exc
            )
            self.metrics.increment(
                "checkpoint_store_errors", shard=part.shard_id, stream=part.stream
            )
        else:
            raise exc

    @staticmethod
    def fence(part: ShardPartition, exc: CheckpointError) -> None:
        """Another owner is ahead of ``part``: stop emitting it."""
        if not part.fenced:
            log.warning(
                "shard %s/%s: another owner is ahead (%s); this worker stops emitting it",
                part.stream,
                part.shard_id,
                exc,
            )
        part.fenced = True

    def pin_start(
        self,
        cfg: SpoutConfig,
        checkpoints: dict[str, Checkpoint],
        shard_ids: Iterable[str],
        has_known_parent: Callable[[str], bool],
        latest: datetime,
    ) -> dict[str, Checkpoint]:
        """At a job's first open with LATEST or AT_TIMESTAMP, save where a stream starts
        (``cfg``: the stream's config): every owned shard (``shard_ids``) without a stored
        checkpoint gets a pin (a checkpoint with ``start_at`` and no sequence) before any
        record is handed out, so a crash before the first real checkpoint resumes from
        the same moment, not a later LATEST, and the open children of a recently
        resharded stream start there too. ``latest`` is what LATEST resolves to. A pin
        saved first by another worker wins. Returns the checkpoints with the pins."""
        if cfg.initial_position is InitialPosition.TRIM_HORIZON:
            return checkpoints
        pins = [cp.start_at for cp in checkpoints.values() if cp.start_at is not None]
        if checkpoints and not pins:
            return checkpoints  # a job that started before pins, or TRIM_HORIZON before
        if pins:  # a first open cut short: pin the rest of the original shards the same
            start: datetime | None = min(pins)
        elif cfg.initial_position is InitialPosition.AT_TIMESTAMP:
            start = cfg.initial_timestamp
        else:
            start = latest
        assert self.store is not None and start is not None
        pinned = dict(checkpoints)
        to_pin = [
            Checkpoint(
                cfg.stream_name,
                shard_id,
                None,
                job_name=cfg.job_name,
                owner=cfg.worker_id,
                start_at=start,
            )
            for shard_id in shard_ids
            # Not those stored, nor those born after the first open (they continue their parents).
            if shard_id not in pinned and not (checkpoints and has_known_parent(shard_id))
        ]
        others: dict[str, Checkpoint] | None = None
        for pin, out in zip(to_pin, self.store.save_many(to_pin), strict=True):
            if isinstance(out, StaleCheckpointError):  # another worker got there first
                if others is None:
                    others = self.store.load(cfg.stream_name)
                if pin.shard_id in others:
                    pinned[pin.shard_id] = others[pin.shard_id]
            elif isinstance(out, CheckpointError):
                raise out
            else:
                pinned[pin.shard_id] = out
                if out.start_at == start:
                    self.fresh_pins.add((cfg.stream_name, pin.shard_id))
        log.info("pinned the start of %d shard(s) at %s", len(pinned), start.isoformat())
        return pinned
