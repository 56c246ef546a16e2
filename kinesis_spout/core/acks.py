"""Acks and fails of one reader, routed to its shard partitions by message id.

A message id is ``"<shardId>:<sequence>[:<sub>]"``, ``"<stream>/<shardId>:..."`` (a reader
of several streams needs the stream), or the :class:`Record` itself. Unknown, repeated and
malformed ids are counted (``ignored``), never raised. A record that runs out of retries
is dead-lettered write-ahead (see :class:`~kinesis_spout.core.partition.ShardPartition`):
the write happens before its tracker may pass it, and a failed write is retried before
every save of its shard.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator

from kinesis_spout.core.age import RecordAge
from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.deadletter import DeadLetter, DeadLetterSink
from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.records import Record, ShardKey, parse_message_id
from tracker import FailAction, FailOutcome, SequenceKey

log = logging.getLogger(__name__)

MessageRef = str | Record


Find = Callable[[str | None, str], "ShardPartition | None"]
"""The reader's partition of ``(stream, shard id)`` (stream None: the reader's one stream;
a reader of several raises, naming the id's missing stream)."""


class AckRouter:
    """Acks, fails and dead letters of one reader; see the module docstring.

    ``find`` looks a shard up in the reader's live partitions; ``sink`` is set when the
    reader opens.
    """

    def __init__(
        self,
        find: Find,
        metrics: MetricsCollector,
        clock: Callable[[], float],
        max_record_age: float | None = None,
    ) -> None:
        self.find = find
        self.age = RecordAge(max_record_age)
        self._deferred: dict[ShardKey, ShardPartition] | None = None
        self.expired = 0
        self._metrics = metrics
        self._clock = clock
        self.sink: DeadLetterSink | None = None
        self.acked = 0
        self.failed = 0
        self.ignored = 0
        self.dead_lettered = 0

    def resolve(self, ref: MessageRef) -> tuple[ShardPartition | None, SequenceKey | None]:
        if isinstance(ref, Record):
            return self.find(ref.stream_name, ref.shard_id), ref.key
        try:
            stream, shard_id, key = parse_message_id(ref)
        except (ValueError, AttributeError, TypeError):
            log.warning("ignoring malformed message id %r", ref)
            return None, None
        return self.find(stream, shard_id), key

    def ack(self, message_id: MessageRef) -> None:
        """The record is fully processed. Unknown or repeated acks are ignored (counted)."""
        sh, key = self.resolve(message_id)
        if sh is None or key is None or sh.tracker is None or not sh.tracker.ack(key):
            self.ignored += 1
            return
        self.acked += 1  # count_acked inline: this is the per-record path
        self._metrics.increment("records_acked", shard=sh.shard_id, stream=sh.stream)

    def count_acked(self, sh: ShardPartition, n: int) -> None:
        """``n`` acks of ``sh`` took effect (here or in a read task): counted in
        :attr:`acked` and as ``records_acked``."""
        self.acked += n
        if n:
            self._metrics.increment("records_acked", n, shard=sh.shard_id, stream=sh.stream)

    def ack_many(self, ids: Iterable[MessageRef]) -> None:
        """``ack`` for each id (one tracker call per shard)."""
        by_shard: dict[tuple[str | None, str], list[SequenceKey]] = {}
        get = by_shard.get
        for ref in ids:
            if isinstance(ref, Record):
                where: tuple[str | None, str] = (ref.stream_name, ref.shard_id)
                key = ref.key
            else:
                try:
                    stream, shard_id, key = parse_message_id(ref)
                except (ValueError, AttributeError, TypeError):
                    log.warning("ignoring malformed message id %r", ref)
                    self.ignored += 1
                    continue
                where = (stream, shard_id)
            keys = get(where)
            if keys is None:
                keys = by_shard[where] = []
            keys.append(key)
        for (stream, shard_id), keys in by_shard.items():
            sh = self.find(stream, shard_id)
            n = sh.tracker.ack_many(keys) if sh is not None and sh.tracker is not None else 0
            if sh is not None:
                self.count_acked(sh, n)
            self.ignored += len(keys) - n

    def fail(self, message_id: MessageRef, error: str | None = None) -> None:
        """The record failed: retried later, or dead-lettered once out of retries."""
        self.fail_many([(message_id, error)])

    def fail_many(self, items: Iterable[tuple[MessageRef, str | None]]) -> None:
        """``fail`` for each ``(id, error)``; the dead letters of the call are
        written together (one write per shard)."""
        now = self._clock()
        with self.deferred():
            for ref, error in items:
                sh, key = self.resolve(ref)
                if sh is None or key is None or sh.tracker is None:
                    self.ignored += 1
                    continue
                record = ref if isinstance(ref, Record) else None
                self.fail_record(sh, key, record, error, now)

    def fail_record(
        self,
        sh: ShardPartition,
        key: SequenceKey,
        record: Record | None,
        error: str | None,
        now: float,
    ) -> None:
        """Fail one record of ``sh``. A :class:`Record` passed back carries its
        last delivery number in ``attempt`` (fast retries made by the caller
        count); a record older than ``max_record_age`` is given up as expired."""
        tracker = sh.tracker
        assert tracker is not None
        held = record if record is not None else tracker.record_of(key)
        expired = self.age.expired(held)
        deliveries = record.attempt if record is not None else 0
        outcome = tracker.fail(key, now, error, deliveries=deliveries, give_up=expired)
        self.after_fail(sh, outcome, "expired" if expired else "exhausted")

    def after_fail(
        self, sh: ShardPartition, outcome: FailOutcome[Record], reason: str = "exhausted"
    ) -> None:
        action = outcome.action
        if action is FailAction.IGNORED:
            self.ignored += 1
            return
        self.failed += 1
        self._metrics.increment("records_failed", shard=sh.shard_id, stream=sh.stream)
        if action is FailAction.GIVEN_UP:
            assert outcome.record is not None
            if reason == "expired":
                self.expired += 1
            letter = DeadLetter(outcome.record, outcome.error, outcome.attempts, reason)
            self.dead_letter(sh, letter)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Dead letters given up inside are written at the end, one write per shard."""
        if self._deferred is not None:
            yield
            return
        self._deferred = {}
        try:
            yield
        finally:
            shards, self._deferred = self._deferred, None
            for sh in shards.values():
                self._write_now(sh)

    def dead_letter(self, sh: ShardPartition, letter: DeadLetter) -> None:
        """Dead-letter a given-up record, write-ahead (see ShardPartition): an
        interrupted write, even a KeyboardInterrupt, leaves it pending, the
        checkpoint below it, and the write is retried before every save."""
        if not sh.queue_dead_letter(letter):
            return  # earlier letters are pending (a failing sink): retried before saves
        if self._deferred is not None:
            self._deferred[sh.key] = sh
        else:
            self._write_now(sh)

    def _write_now(self, sh: ShardPartition) -> None:
        if sh.dead_pending and not self.flush_dead(sh):
            log.error(
                "dead-letter write of %s failed; shard %s/%s stops emitting and its "
                "checkpoint is held until the write succeeds",
                sh.dead_pending[0].record.stream_message_id,
                sh.stream,
                sh.shard_id,
            )

    def count_given_up(self, sh: ShardPartition, reasons: list[str]) -> None:
        """Given-up records now done (their dead letters written), counted once each under
        their reason: ``records_expired`` (older than ``max_record_age``) or
        ``dead_lettered`` (out of retries), so the two never overlap."""
        expired = reasons.count("expired")
        where = {"shard": sh.shard_id, "stream": sh.stream}
        if expired:
            self._metrics.increment("records_expired", expired, **where)
        if len(reasons) > expired:
            self._metrics.increment("dead_lettered", len(reasons) - expired, **where)

    def flush_dead(self, sh: ShardPartition) -> bool:
        """Write the shard's pending dead letters in order; False if one still fails."""
        assert self.sink is not None
        reasons = [letter.reason for letter in sh.dead_pending]
        written, exc = sh.flush_dead_letters(self.sink)
        if written:
            self.dead_lettered += written
            self.count_given_up(sh, reasons[:written])
        if exc is not None:
            log.warning(
                "dead-letter write of %s failing: %s",
                sh.dead_pending[0].record.stream_message_id,
                exc,
            )
            self._metrics.increment("dead_letter_errors", shard=sh.shard_id, stream=sh.stream)
            return False
        return True
