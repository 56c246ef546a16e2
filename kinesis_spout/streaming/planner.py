"""The offset process's state (no PySpark): shard listing, read-ahead to decide
where each shard's batch ends, prefetching the next batch, and the checkpoint
store mirror. Lazily built by the stream reader and never pickled."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kinesis_spout.config import InitialPosition
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.records import ShardInfo
from kinesis_spout.streaming.errors import DataLossError, OffsetError
from kinesis_spout.streaming.offsets import (
    ShardPosition,
    SourceOffset,
    StartPosition,
    expired_ended,
    ready_shards,
    split_quota,
    vanished,
)
from kinesis_spout.streaming.options import SourceOptions
from kinesis_spout.streaming.shard_reader import ReadAhead, read_ahead
from kinesis_spout.streaming.store_mirror import StoreMirror

log = logging.getLogger(__name__)

MAX_READ_AHEAD_FAILURES = 20
"""Retriable errors in a row on one shard after which ``latestOffset`` gives up."""


@dataclass(frozen=True, slots=True)
class _Ahead:
    """One read-ahead over the shards: the new offset and whether it is final."""

    offset: SourceOffset
    full: bool
    """Every ready shard gave its whole quota."""
    finished: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class _ShardState:
    """The offset process's memory of one shard (pacing and a reusable iterator)."""

    iterator_after: ShardPosition | None = None
    iterator: str | None = None
    next_poll: float = 0.0
    """Monotonic time before which the shard is not read ahead again."""
    failures: int = 0
    caught_up: bool = False
    """availableNow: the shard reached its tip after the cutoff; nothing more to read."""


class Planner:
    """State of the offset process: lazily built, never pickled."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.cutoff: datetime | None = None
        self._api: KinesisApi | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._prefetcher: ThreadPoolExecutor | None = None
        self._prefetch: tuple[SourceOffset, int | None, Future[_Ahead]] | None = None
        self._mirror = StoreMirror(options)
        self._initial: SourceOffset | None = None
        self._last_planned: SourceOffset | None = None
        self._listed: list[ShardInfo] = []
        self._listed_at = float("-inf")
        self._shards: dict[str, _ShardState] = {}
        self._turn = 0

    @property
    def api(self) -> KinesisApi:
        if self._api is None:
            opts = self.options
            self._api = KinesisApi(make_client(opts.endpoint_url, opts.region), opts.stream_name)
        return self._api

    def parse(self, doc: Any) -> SourceOffset:
        offset = SourceOffset.from_json(doc)
        if offset.stream_name != self.options.stream_name:
            raise OffsetError(
                f"the checkpoint location holds offsets of stream {offset.stream_name!r}, "
                f"but streamName is {self.options.stream_name!r}: use a new checkpoint location"
            )
        return offset

    def planned(self, end: SourceOffset) -> None:
        """Remember the last planned offset: PySpark 4.0 calls ``latestOffset()``
        without a start (and ``partitions(x, x)`` after a restart)."""
        self._last_planned = end

    # --- initial and latest offsets -------------------------------------------------
    def initial_offset(self) -> SourceOffset:
        """The query's first start; LATEST is pinned to "now" (as AT_TIMESTAMP)
        once per process, so a replay of the first batch reads the same records."""
        if self._initial is None:
            opts = self.options
            self.api.check_stream()
            if opts.initial_position is InitialPosition.LATEST:
                # Kinesis arrival times have millisecond resolution: round down, so a
                # record put in the same millisecond is in, never out.
                now = datetime.now(UTC)
                now = now.replace(microsecond=now.microsecond // 1000 * 1000)
                start = StartPosition(InitialPosition.AT_TIMESTAMP, now)
            elif opts.initial_position is InitialPosition.AT_TIMESTAMP:
                start = StartPosition(InitialPosition.AT_TIMESTAMP, opts.initial_timestamp)
            else:
                start = StartPosition()
            self._initial = SourceOffset(opts.stream_name, start, {})
            log.info("kinesis source on %s starts at %s", opts.stream_name, start.to_json())
        return self._initial

    def list_shards(self) -> list[ShardInfo]:
        now = time.monotonic()
        if now - self._listed_at >= self.options.shard_list_interval:
            self._listed = self.api.list_shards()
            self._listed_at = now
        return self._listed

    def latest(self, start_doc: dict[str, Any] | None, total: int | None) -> SourceOffset:
        if start_doc is not None:
            start = self.parse(start_doc)
        else:
            start = self._last_planned or self.initial_offset()
        new = self._take_prefetch(start, total)
        if new is None:
            new = self._read_ahead(start, total).offset
        self._last_planned = new
        if new != start:
            self._start_prefetch(new, total)
        return new

    def _start_prefetch(self, start: SourceOffset, total: int | None) -> None:
        """Read ahead for the batch after ``start`` while Spark runs the batch
        that ends at ``start``: the next ``latestOffset`` is then mostly ready.
        Only one read-ahead runs at a time (they share the shards' iterators)."""
        if self._prefetcher is None:
            self._prefetcher = ThreadPoolExecutor(1, thread_name_prefix="kinesis-prefetch")
        self._prefetch = (start, total, self._prefetcher.submit(self._read_ahead, start, total))

    def _take_prefetch(self, start: SourceOffset, total: int | None) -> SourceOffset | None:
        """The prefetched offset if it was computed from ``start`` with ``total``;
        waits for it either way, so no two read-aheads overlap."""
        if self._prefetch is None:
            return None
        from_offset, from_total, future = self._prefetch
        self._prefetch = None
        try:
            ready = future.result()
        except Exception as exc:  # read again in the foreground, where it is raised
            log.info("prefetched read-ahead failed (%s); reading again", exc)
            return None
        if from_offset != start or from_total != total:
            return None
        # A prefetch that reached a shard's tip misses what arrived since: use it
        # only while fresh (or under availableNow, which ignores later records).
        age = time.monotonic() - ready.finished
        if ready.full or self.cutoff is not None or age <= self.options.idle_poll_interval:
            return ready.offset
        return None

    def _read_ahead(self, start: SourceOffset, total: int | None) -> _Ahead:
        opts = self.options
        listed = self.list_shards()
        drop = expired_ended(listed, start)
        gone = vanished(listed, start)
        if gone:
            msg = (
                f"shards {gone} of {opts.stream_name} disappeared from ListShards before "
                "they were read to their end: their remaining records expired"
            )
            if opts.fail_on_data_loss:
                raise DataLossError(msg + "; set failOnDataLoss=false to go on without them")
            log.warning("%s (failOnDataLoss=false: going on)", msg)
            drop += gone
        ready = ready_shards(listed, start)
        while True:
            now = time.monotonic()
            states = {s: self._shards.setdefault(s, _ShardState()) for s in ready}
            pollable = [s for s in ready if states[s].next_poll <= now and not states[s].caught_up]
            quotas = split_quota(pollable, opts.max_records_per_shard, total, self._turn)
            self._turn += 1
            results = self._run(start, quotas)
            positions = {r.shard_id: r.position for r in results if r.position is not None}
            waiting = [s for s in ready if states[s].failures and not states[s].caught_up]
            if positions or not waiting or self.cutoff is None:
                break
            # availableNow must not end while a throttled shard still has records
            # before the cutoff: wait for its backoff instead of reporting "no data".
            time.sleep(max(0.0, min(states[s].next_poll for s in waiting) - time.monotonic()))
        ended = [s for s, p in positions.items() if p.ended]
        if ended:
            self._listed_at = float("-inf")  # children are now due: list again next time
            log.info("shards ended in %s: %s", opts.stream_name, ", ".join(ended))
        # "Full": every ready shard gave its whole quota, so reading again later
        # could not have added anything to this batch.
        full = all((p := positions.get(s)) is not None and p.count == quotas.get(s) for s in ready)
        if not positions and not drop:
            return _Ahead(start, full)
        return _Ahead(start.updated(positions, drop), full)

    def _run(self, start: SourceOffset, quotas: dict[str, int]) -> list[ReadAhead]:
        if not quotas:
            return []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.options.read_ahead_threads, thread_name_prefix="kinesis-ahead"
            )
        futures = [
            self._pool.submit(self._read_shard, start, shard, quota)
            for shard, quota in quotas.items()
        ]
        return [f.result() for f in futures]

    def _read_shard(self, start: SourceOffset, shard: str, quota: int) -> ReadAhead:
        opts = self.options
        after = start.shards.get(shard)
        state = self._shards[shard]
        iterator = state.iterator if state.iterator_after == after else None
        result = read_ahead(
            self.api,
            shard,
            after,
            start.start,
            quota,
            fetch=opts.max_records_per_fetch,
            iterator=iterator,
            cutoff=self.cutoff,
        )
        state.iterator = result.next_iterator
        state.iterator_after = result.position or after
        now = time.monotonic()
        if result.error is not None:
            state.failures += 1
            if state.failures >= MAX_READ_AHEAD_FAILURES:
                raise result.error
            state.next_poll = now + min(10.0, 0.2 * 2 ** min(state.failures, 6))
        else:
            state.failures = 0
            state.next_poll = now + (opts.idle_poll_interval if result.idle else 0.0)
            state.caught_up = self.cutoff is not None and result.idle
        return result

    def commit(self, end: SourceOffset) -> None:
        """Mirror ``end`` into the checkpoint store (see :class:`StoreMirror`)."""
        self._mirror.commit(end)

    def close(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.shutdown(wait=True, cancel_futures=True)
            self._prefetcher = None
            self._prefetch = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._mirror.close()
