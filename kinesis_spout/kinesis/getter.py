"""Reading one shard by polling: :class:`KinesisShardGetter`.

GetShardIterator and GetRecords for the spout, Spark read tasks and the streaming source.
It never sleeps: ``poll(now)`` makes at most one GetRecords call (plus a GetShardIterator
when it needs an iterator) and returns a :class:`~kinesis_spout.records.ShardBatch` whose
``next_poll_at`` the caller sleeps on.

Three rules: every answer is cut to keys after ``after`` (the last record returned, at
start the checkpoint), so a re-read never duplicates; a retriable error keeps the same
iterator (an immutable position), so nothing is skipped or read twice; an answer ends on a
whole Kinesis record, never inside a KPL aggregate, so a re-open after it is
``AFTER_SEQUENCE_NUMBER``. Each answer and what the getter does, and resumes inside an
aggregate: docs/reader.md ("How the reading works", "Checkpoints and KPL aggregates").
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kinesis_spout.config import InitialPosition
from kinesis_spout.errors import (
    CredentialsError,
    EndpointUnreachableError,
    ExpiredIteratorError,
    InvalidPositionError,
    KinesisError,
    StreamNotFoundError,
    ThrottledError,
    TransientKinesisError,
)
from kinesis_spout.kinesis.api import GetRecordsResult, KinesisApi
from kinesis_spout.records import GetterPosition, ShardBatch, ShardInfo
from tracker import Backoff, SequenceKey

log = logging.getLogger(__name__)

__all__ = [
    "InvalidPositionError",
    "KinesisShardGetter",
]

NEVER = math.inf
#: How far before the first LATEST iterator (or subscription) a re-open before any record
#: starts: the server's Date header has whole seconds.
LATEST_MARGIN = timedelta(seconds=1)


def latest_start(server_time: datetime | None, local: datetime | None = None) -> datetime:
    """Where a LATEST start is pinned: by the server's clock (an answer's ``Date``
    header) when it says, else by ``local`` (default: now), less :data:`LATEST_MARGIN`,
    so nothing written after the start is skipped (at worst a second or two from before
    it is read)."""
    return (server_time or local or datetime.now(UTC)) - LATEST_MARGIN


_RETRIABLE = (ThrottledError, TransientKinesisError, EndpointUnreachableError)
_NO_CHILDREN: tuple[ShardInfo, ...] = ()


def _utcnow() -> datetime:
    return datetime.now(UTC)


class KinesisShardGetter:
    """GetShardIterator + GetRecords for one shard; never blocks, never duplicates.

    ``start`` is the shard's checkpoint (resume after it), or None to start
    at ``position``. ``backoff`` spaces retries after throttling and 5xx
    answers (attempt 1, 2, ... since the last success); pass a
    ``JitteredBackoff`` with a seeded RNG for reproducible tests. ``timer`` times
    the GetRecords calls (:attr:`ShardBatch.seconds`, for the latency metric).
    """

    def __init__(
        self,
        api: KinesisApi,
        shard_id: str,
        *,
        backoff: Backoff,
        start: SequenceKey | None = None,
        position: InitialPosition = InitialPosition.TRIM_HORIZON,
        timestamp: datetime | None = None,
        limit: int = 10_000,
        max_calls_per_second: float = 5.0,
        empty_shard_backoff: float = 1.0,
        empty_shard_backoff_max: float | None = None,
        wall_clock: Callable[[], datetime] = _utcnow,
        iterator: str | None = None,
        after_whole: bool | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        if position is InitialPosition.AT_TIMESTAMP and timestamp is None and start is None:
            raise ValueError("position AT_TIMESTAMP needs a timestamp")
        self.api = api
        self.shard_id = shard_id
        self.limit = limit
        self.min_interval = 1.0 / max_calls_per_second
        self.empty_shard_backoff = empty_shard_backoff
        self.empty_shard_backoff_max = max(empty_shard_backoff_max or 0.0, empty_shard_backoff)
        """The longest wait after empty answers in a row (None: ``empty_shard_backoff``)."""
        self._empty_answers = 0
        self._backoff = backoff
        self._position = position
        self._timestamp = timestamp
        self._wall_clock = wall_clock
        self._timer = timer
        self._after: SequenceKey | None = start
        self._after_whole = (
            start is not None and start.sub_sequence == 0 if after_whole is None else after_whole
        )
        self._iterator: str | None = iterator
        self._next_poll_at = -NEVER
        self._failures = 0
        self._ended = False
        self.caught_up = False
        """The last answer had no records and was not behind: the shard's tip is reached."""
        self.millis_behind_latest: int | None = None
        self.calls = 0
        self.errors = 0
        self.expired_iterators = 0

    # --- read-only state ---------------------------------------------------
    @property
    def after(self) -> SequenceKey | None:
        """Key of the last record returned (or the start checkpoint)."""
        return self._after

    @property
    def ended(self) -> bool:
        """The shard is closed and every record in it was returned."""
        return self._ended

    @property
    def next_poll_at(self) -> float:
        return NEVER if self._ended else self._next_poll_at

    def idle_wait(self, records: int) -> float:
        """The wait after an answer at the shard's tip that had ``records`` records:
        ``empty_shard_backoff``, doubled for each further empty answer in a row, up to
        ``empty_shard_backoff_max`` (a quiet shard costs fewer calls; its first new record
        waits at most that long)."""
        if records:
            self.records_answered()
            return self.empty_shard_backoff
        self._empty_answers += 1
        grown = self.empty_shard_backoff * 2.0 ** min(self._empty_answers - 1, 32)
        return min(grown, self.empty_shard_backoff_max)

    def records_answered(self) -> None:
        """An answer had records: the next empty answer waits ``empty_shard_backoff``
        again (see :meth:`idle_wait`)."""
        self._empty_answers = 0

    def due(self, now: float) -> bool:
        return not self._ended and now >= self._next_poll_at

    def at_tip_after(self, batch: ShardBatch, asked: int) -> bool:
        """A bounded read's rule for the tip: an answer short of the ``asked`` records and
        not behind (an empty answer that is behind is a gap or old data: read on)."""
        return len(batch.records) < asked and not batch.millis_behind_latest

    @property
    def position(self) -> GetterPosition:
        """Where the next read starts: what a reader elsewhere needs to continue."""
        return GetterPosition(
            self._iterator, self._after, self._after_whole, self._position, self._timestamp
        )

    def advance(
        self,
        position: GetterPosition,
        *,
        ended: bool,
        behind: int | None,
        caught_up: bool,
        next_poll_at: float,
    ) -> None:
        """A reader elsewhere (an executor) read on from :attr:`position` to ``position``."""
        self._iterator = position.iterator
        self._after, self._after_whole = position.after, position.after_whole
        self._position, self._timestamp = position.initial, position.timestamp
        self._ended = self._ended or ended
        self.millis_behind_latest = behind
        self.caught_up = caught_up
        self._next_poll_at = next_poll_at

    def drop_iterator(self) -> None:
        """Forget the iterator (it expired elsewhere): the next read re-opens after ``after``."""
        self._iterator = None

    def cut(self, batch: ShardBatch, keep: int) -> ShardBatch:
        """Take only the first ``keep`` records of ``batch`` (the last poll's answer),
        ``keep >= 1``: the next poll reads on right after the last one kept, inside its
        KPL aggregate if the cut falls there (a new iterator, so nothing is skipped)."""
        recs = batch.records
        if keep >= len(recs):
            return batch
        kept, last = recs[:keep], recs[keep - 1]
        self._after = last.key
        self._after_whole = recs[keep].sequence_number != last.sequence_number
        self._iterator = None
        self._ended = False
        self.caught_up = False
        seq = last.key.sequence
        return dataclasses.replace(
            batch,
            records=kept,
            next_poll_at=min(batch.next_poll_at, self._next_poll_at),
            ended=False,
            child_shards=_NO_CHILDREN,
            aggregates=tuple(a for a in batch.aggregates if a <= seq),
            skipped_tail=None,
        )

    # --- polling ------------------------------------------------------------
    def poll(self, now: float) -> ShardBatch:
        """At most one GetRecords call; records after ``after``; never sleeps."""
        if self._ended:
            return ShardBatch([], NEVER, ended=True)
        if now < self._next_poll_at:
            return ShardBatch([], self._next_poll_at)
        self._next_poll_at = now + self.min_interval
        started: float | None = None
        try:
            if self._iterator is None:
                self._iterator = self._open_iterator()
            self.calls += 1
            started = self._timer()
            result = self.api.get_records(self.shard_id, self._iterator, self.limit)
        except ExpiredIteratorError as exc:
            self.expired_iterators += 1
            self._iterator = None
            log.info("%s: iterator expired, re-opening after %s", self.shard_id, self._after)
            return ShardBatch([], self._next_poll_at, error=exc, seconds=self._since(started))
        except _RETRIABLE as exc:
            self._failures += 1
            self.errors += 1
            wait = max(self.min_interval, self._backoff.delay(self._failures))
            self._next_poll_at = now + wait
            log.debug("%s: %s; backing off %.3fs", self.shard_id, exc, wait)
            return ShardBatch([], self._next_poll_at, error=exc, seconds=self._since(started))
        self._failures = 0
        return self._accept(result, now, self._timer() - started)

    def _since(self, started: float | None) -> float | None:
        return None if started is None else self._timer() - started

    def _accept(self, result: GetRecordsResult, now: float, seconds: float) -> ShardBatch:
        records = result.records
        after = self._after
        if records and after is not None and records[0].key <= after:
            records = [r for r in records if r.key > after]
        aggregates: tuple[int, ...] = ()
        if records:
            last = records[-1].key
            self._after = last
            self._after_whole = True
            if len(result.records) > result.raw_count or result.skipped:
                aggregates = tuple(r.key.sequence for r in records if r.key.sub_sequence == 1)
        tail = self._skipped_tail(result)
        extra: dict[str, Any] = {}
        if result.skipped or result.corrupt_aggregates:
            extra = {
                "skipped": len(result.skipped),
                "skipped_tail": tail,
                "corrupt_aggregates": result.corrupt_aggregates,
            }
        self._iterator = result.next_iterator
        behind = result.millis_behind_latest
        self.millis_behind_latest = behind
        self.caught_up = result.raw_count == 0 and not behind
        if result.next_iterator is None:
            self._ended = True
            log.info("%s: end of closed shard reached", self.shard_id)
            return ShardBatch(
                records,
                NEVER,
                ended=True,
                called=True,
                millis_behind_latest=behind,
                child_shards=result.child_shards,
                aggregates=aggregates,
                seconds=seconds,
                **extra,
            )
        if result.raw_count == 0 and not behind:
            self._next_poll_at = max(self._next_poll_at, now + self.idle_wait(0))
        elif result.raw_count:
            self.records_answered()
        return ShardBatch(
            records,
            self._next_poll_at,
            called=True,
            millis_behind_latest=behind,
            child_shards=result.child_shards,
            aggregates=aggregates,
            seconds=seconds,
            **extra,
        )

    def stop_soon(self) -> None:
        """Nothing runs: a polling getter holds no connection or thread."""

    def close(self, timeout: float = 0.0) -> None:
        """Nothing to free: a polling getter holds no connection or thread."""

    def open_now(self) -> None:
        """Get the shard iterator now rather than at the first poll (so LATEST means
        "from this call on", not "from the first poll on")."""
        if self._iterator is None and not self._ended:
            try:
                self._iterator = self._open_iterator()
            except _RETRIABLE as exc:  # the first poll opens it then, with its backoff
                log.info("%s: could not open the iterator yet: %s", self.shard_id, exc)

    def _skipped_tail(self, result: GetRecordsResult) -> SequenceKey | None:
        """The last skipped empty aggregate after every record read so far, or None.

        It becomes the position to resume after, so a re-opened iterator does not
        read it again.
        """
        if not result.skipped:
            return None
        tail = result.skipped[-1]
        after = self._after
        if after is not None and tail <= after:
            return None
        self._after = tail
        self._after_whole = True
        return tail

    def _open_iterator(self) -> str:
        after = self._after
        if after is not None:
            seq = str(after.sequence)
            try:
                if self._after_whole:
                    return self.api.shard_iterator(self.shard_id, after_sequence=seq)
                return self.api.shard_iterator(self.shard_id, at_sequence=seq)
            except KinesisError as exc:
                # Real Kinesis says InvalidArgumentException; kinesis-mock says
                # ResourceNotFoundException "Unable to find record with provided SequenceNumber".
                if exc.retriable or isinstance(exc, CredentialsError):
                    raise
                if isinstance(exc, StreamNotFoundError) and "sequence" not in str(exc).lower():
                    raise
                raise InvalidPositionError(
                    f"shard {self.shard_id}: Kinesis rejected the position after sequence "
                    f"{after} (a checkpoint from an older stream of the same name?): {exc}"
                ) from exc
        position, timestamp = self._position, self._timestamp
        if position is InitialPosition.LATEST:
            # Remember when, by the server's clock if it says (its Date header has whole
            # seconds, hence the margin): a re-open after an expiry must not skip what
            # came since. At worst it re-reads a second or two from before the start.
            local = self._wall_clock()
            iterator = self.api.shard_iterator(self.shard_id, position=position)
            opened = latest_start(self.api.server_time, local)
            self._position, self._timestamp = InitialPosition.AT_TIMESTAMP, opened
            return iterator
        return self.api.shard_iterator(self.shard_id, position=position, timestamp=timestamp)
