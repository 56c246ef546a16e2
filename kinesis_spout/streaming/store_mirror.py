"""The streaming source's mirror of its committed offsets into a checkpoint store.

Spark's checkpoint location is the source of truth; the store only shows
progress (and lets ``kinesis-spout status`` and other tools read it), so a
store error never fails the query: it is logged and the next commit retries.

A store position has no partial flag: ``(seq, sub)`` with ``sub > 0`` resumes inside
the KPL aggregate ``seq`` after ``sub``, but ``(seq, 0)`` reads as "record ``seq`` is
done". So a partial position after an aggregate's first user record is not mirrored:
the shard's previous one stays (a resume replays that user record, and skips none),
as :meth:`kinesis_spout.core.committer.Committer.save` does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kinesis_spout.errors import CheckpointError, KinesisSpoutError, StaleCheckpointError
from kinesis_spout.records import Checkpoint, ShardPosition
from kinesis_spout.streaming.offsets import SourceOffset
from kinesis_spout.streaming.options import SourceOptions

if TYPE_CHECKING:
    from kinesis_spout.checkpoint.base import CheckpointStore

log = logging.getLogger(__name__)


class StoreMirror:
    """Writes each shard's committed position to ``options.checkpoint_store``
    (opened lazily, once per process, shared by the source's streams: each stream's
    checkpoints are under its name), skipping positions already written."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._store: CheckpointStore | None = None
        self._committed: dict[tuple[str, str], tuple[str | None, int, bool]] = {}
        """Per (stream, shard), the position last written."""

    def commit(self, end: SourceOffset) -> None:
        """Mirror ``end`` into the checkpoint store. Never fails the query: the
        Spark checkpoint location is the source of truth, the store shows progress."""
        opts = self.options
        if opts.checkpoint_store is None:
            return
        try:
            store = self._open_store()
        except KinesisSpoutError as exc:
            log.warning("checkpoint store %s unavailable: %s", opts.checkpoint_store, exc)
            return
        for shard in sorted(end.shards):
            pos = end.shards[shard]
            mark = (pos.sequence, pos.sub_sequence, pos.ended)
            key = (end.stream_name, shard)
            if self._committed.get(key) == mark:
                continue
            if pos.partial and pos.sub_sequence == 0:
                log.debug("checkpoint of %s/%s kept: %s is inside an aggregate", *key, pos.key)
                continue
            if self._write(store, end.stream_name, shard, pos):
                self._committed[key] = mark

    def _write(self, store: CheckpointStore, stream: str, shard: str, pos: ShardPosition) -> bool:
        """Write one shard's checkpoint; False: not written (the next commit retries)."""
        opts = self.options
        try:
            if pos.sequence is None:
                store.mark_ended(stream, shard, opts.owner)
            else:
                store.save(
                    Checkpoint(
                        stream,
                        shard,
                        pos.sequence,
                        pos.sub_sequence,
                        shard_end=pos.ended,
                        job_name=opts.job_name,
                        owner=opts.owner,
                    )
                )
        except StaleCheckpointError as exc:
            log.info("checkpoint of %s/%s not moved: %s", stream, shard, exc)
        except CheckpointError as exc:
            log.warning(
                "checkpoint of %s/%s not written (next commit retries): %s", stream, shard, exc
            )
            return False
        return True

    def _open_store(self) -> CheckpointStore:
        if self._store is None:
            from kinesis_spout.checkpoint.factory import open_store

            opts = self.options
            assert opts.checkpoint_store is not None
            self._store = open_store(
                opts.checkpoint_store,
                opts.job_name,
                owner=opts.owner,
                zk_auth=opts.zk_auth,
                region=opts.region,
            )
        return self._store

    def close(self) -> None:
        if self._store is not None:
            try:
                self._store.close()
            except KinesisSpoutError as exc:
                log.warning("closing the checkpoint store: %s", exc)
            self._store = None
