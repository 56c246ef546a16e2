"""Acks and fails of one reader, routed to its shard partitions by message id.

A message id is ``"<shardId>:<sequence>[:<sub>]"`` (or the :class:`Record`
itself). Unknown, repeated and malformed ids are counted (``ignored``), never
raised. A record that runs out of retries is dead-lettered write-ahead (see
:class:`~kinesis_spout.core.partition.ShardPartition`): the write happens
before its tracker may pass it, and a failed write is retried before every
save of its shard.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.deadletter import DeadLetterSink
from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.records import Record, parse_message_id
from tracker import FailAction, FailOutcome, SequenceKey

log = logging.getLogger(__name__)

MessageRef = str | Record


class AckRouter:
    """Acks, fails and dead letters of one reader; see the module docstring.

    ``shards`` is the reader's live map of partitions; ``sink`` is set when
    the reader opens.
    """

    def __init__(
        self,
        shards: Mapping[str, ShardPartition],
        metrics: MetricsCollector,
        clock: Callable[[], float],
    ) -> None:
        self.shards = shards
        self._metrics = metrics
        self._clock = clock
        self.sink: DeadLetterSink | None = None
        self.acked = 0
        self.failed = 0
        self.ignored = 0
        self.dead_lettered = 0

    def resolve(self, ref: MessageRef) -> tuple[ShardPartition | None, SequenceKey | None]:
        if isinstance(ref, Record):
            return self.shards.get(ref.shard_id), ref.key
        try:
            shard_id, key = parse_message_id(ref)
        except (ValueError, AttributeError, TypeError):
            log.warning("ignoring malformed message id %r", ref)
            return None, None
        return self.shards.get(shard_id), key

    def ack(self, message_id: MessageRef) -> None:
        """The record is fully processed. Unknown or repeated acks are ignored (counted)."""
        sh, key = self.resolve(message_id)
        if sh is None or key is None or sh.tracker is None or not sh.tracker.ack(key):
            self.ignored += 1
            return
        self.acked += 1

    def ack_many(self, ids: Iterable[MessageRef]) -> None:
        """``ack`` for each id (one tracker call per shard)."""
        by_shard: dict[str, list[SequenceKey]] = {}
        get = by_shard.get
        for ref in ids:
            if isinstance(ref, Record):
                shard_id, key = ref.shard_id, ref.key
            else:
                try:
                    shard_id, key = parse_message_id(ref)
                except (ValueError, AttributeError, TypeError):
                    log.warning("ignoring malformed message id %r", ref)
                    self.ignored += 1
                    continue
            keys = get(shard_id)
            if keys is None:
                keys = by_shard[shard_id] = []
            keys.append(key)
        acked = 0
        total = 0
        for shard_id, keys in by_shard.items():
            total += len(keys)
            sh = self.shards.get(shard_id)
            if sh is not None and sh.tracker is not None:
                acked += sh.tracker.ack_many(keys)
        self.acked += acked
        self.ignored += total - acked

    def fail(self, message_id: MessageRef, error: str | None = None) -> None:
        """The record failed: retried later, or dead-lettered once out of retries."""
        sh, key = self.resolve(message_id)
        if sh is None or key is None or sh.tracker is None:
            self.ignored += 1
            return
        self.after_fail(sh, sh.tracker.fail(key, self._clock(), error))

    def fail_many(self, items: Iterable[tuple[MessageRef, str | None]]) -> None:
        """``fail`` for each ``(id, error)``."""
        now = self._clock()
        for ref, error in items:
            sh, key = self.resolve(ref)
            if sh is None or key is None or sh.tracker is None:
                self.ignored += 1
                continue
            self.after_fail(sh, sh.tracker.fail(key, now, error))

    def after_fail(self, sh: ShardPartition, outcome: FailOutcome[Record]) -> None:
        action = outcome.action
        if action is FailAction.IGNORED:
            self.ignored += 1
            return
        self.failed += 1
        self._metrics.increment("records_failed", shard=sh.shard_id)
        if action is FailAction.GIVEN_UP:
            assert outcome.record is not None
            self.dead_letter(sh, outcome.record, outcome.error, outcome.attempts)

    def dead_letter(
        self, sh: ShardPartition, record: Record, error: str | None, attempts: int
    ) -> None:
        """Dead-letter a given-up record, write-ahead (see ShardPartition): an
        interrupted write, even a KeyboardInterrupt, leaves it pending, the
        checkpoint below it, and the write is retried before every save."""
        if sh.queue_dead_letter(record, error, attempts) and not self.flush_dead(sh):
            log.error(
                "dead-letter write of %s failed; shard %s stops emitting and its checkpoint "
                "is held until the write succeeds",
                record.message_id,
                sh.shard_id,
            )

    def flush_dead(self, sh: ShardPartition) -> bool:
        """Write the shard's pending dead letters in order; False if one still fails."""
        assert self.sink is not None
        written, exc = sh.flush_dead_letters(self.sink)
        if written:
            self.dead_lettered += written
            self._metrics.increment("dead_lettered", written, shard=sh.shard_id)
        if exc is not None:
            log.warning(
                "dead-letter write of %s failing: %s", sh.dead_pending[0][0].message_id, exc
            )
            self._metrics.increment("dead_letter_errors", shard=sh.shard_id)
            return False
        return True
