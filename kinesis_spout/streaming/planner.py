"""The offset process's state (no PySpark): shard listing, batch plans, commits.

``latestOffset`` never reads records: it lists shards (cheap, cached) and
reads the batch-end records the last batch's tasks left in the checkpoint
store (:mod:`~kinesis_spout.checkpoint.batch_ends`), then plans the next batch from them
(:class:`~.batch_offset.BatchOffset`). A shard whose last read reached its
tip rests for ``idle_poll_interval`` before it gets a quota again (one that
was throttled, for ``THROTTLE_REST``); while every shard rests there is no
new batch, so an idle stream costs no Spark job and a batch with no new data
is rare and short. Under availableNow, "no new batch" ends the query, so
there the planner waits out the rest of shards not yet at the cutoff instead.
Lazily built by the stream reader and never pickled.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kinesis_spout.checkpoint.batch_ends import (
    BatchEnd,
    BatchEndError,
    BatchEndStore,
    PlannedFrom,
    check_planned,
)
from kinesis_spout.config import InitialPosition
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.kinesis.efo_read import EfoTarget
from kinesis_spout.records import ShardInfo, ShardPosition, StartPosition
from kinesis_spout.streaming.batch_offset import BatchOffset, ShardPlan
from kinesis_spout.streaming.errors import DataLossError, OffsetError
from kinesis_spout.streaming.offsets import SourceOffset, split_quota
from kinesis_spout.streaming.options import SourceOptions
from kinesis_spout.streaming.store_mirror import StoreMirror

log = logging.getLogger(__name__)

THROTTLE_REST = 1.0
"""Seconds a shard whose last read was throttled waits for its next quota."""


class Planner:
    """State of the offset process: lazily built, never pickled."""

    def __init__(
        self,
        options: SourceOptions,
        store: BatchEndStore | None = None,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.options = options
        self._clock, self._sleep = clock, sleep
        """Wall time (batch-end records carry wall times) and the wait of availableNow."""
        self.cutoff: datetime | None = None
        self._api: KinesisApi | None = None
        self._store = store
        self._mirror = StoreMirror(options)
        self._initial: BatchOffset | None = None
        self._last_planned: BatchOffset | None = None
        self._listed: list[ShardInfo] = []
        self._listed_at = float("-inf")
        self._ends: dict[int, dict[str, BatchEnd]] = {}
        self._rest_until: dict[str, float] = {}
        """Wall time before which a shard gets no quota (it was at its tip)."""
        self._done: set[str] = set()
        """availableNow: shards read up to the cutoff."""
        self._turn = 0
        self._efo: EfoTarget | None = None

    @property
    def api(self) -> KinesisApi:
        if self._api is None:
            opts = self.options
            self._api = KinesisApi(make_client(opts.endpoint_url, opts.region), opts.stream_name)
        return self._api

    @property
    def store(self) -> BatchEndStore:
        if self._store is None:
            from kinesis_spout.checkpoint.factory import open_batch_ends

            opts = self.options
            assert opts.checkpoint_store is not None
            self._store = open_batch_ends(
                opts.checkpoint_store, opts.job_name, opts.stream_name, opts.zk_auth
            )
        return self._store

    def efo_target(self) -> EfoTarget | None:
        """``consumer=efo``: where the tasks subscribe (the consumer registered if absent
        and ACTIVE, once per process); None for polling."""
        opts = self.options
        if opts.consumer != "efo":
            return None
        if self._efo is None:
            from kinesis_spout.kinesis.consumer import ensure_consumer
            from kinesis_spout.kinesis.efo_api import FanOutApi

            consumer = ensure_consumer(FanOutApi(self.api), opts.consumer_name)
            self._efo = EfoTarget(opts.stream_name, opts.region, opts.endpoint_url, consumer.arn)
        return self._efo

    def closed_shards(self) -> frozenset[str]:
        """The shards the last ListShards answer gave an ending sequence number."""
        return frozenset(s.shard_id for s in self._listed if s.is_closed)

    def parse(self, doc: Any) -> BatchOffset:
        offset = BatchOffset.from_json(doc)
        opts = self.options
        if offset.stream_name != opts.stream_name or offset.job_name != opts.job_name:
            raise OffsetError(
                f"the checkpoint location holds offsets of stream {offset.stream_name!r}, job "
                f"{offset.job_name!r}, but this query reads stream {opts.stream_name!r} as job "
                f"{opts.job_name!r}: use a new checkpoint location, or the same streamName "
                "and jobName"
            )
        return offset

    def planned(self, end: BatchOffset) -> None:
        """Remember the last planned offset: PySpark 4.0 calls ``latestOffset()``
        without a start."""
        self._last_planned = end

    # --- initial and latest offsets -------------------------------------------------
    def initial_offset(self) -> BatchOffset:
        """Batch 0: reads nothing. LATEST is pinned to "now" (as AT_TIMESTAMP) once
        per process, so a replay of the first batch reads the same records."""
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
            run = uuid.uuid4().hex  # names this checkpoint location: see batch_offset
            self._initial = BatchOffset(opts.stream_name, opts.job_name, 0, start, {}, run=run)
            log.info(
                "kinesis source on %s starts at %s (run %s)", opts.stream_name, start.to_json(), run
            )
        return self._initial

    def list_shards(self) -> list[ShardInfo]:
        now = time.monotonic()
        if now - self._listed_at >= self.options.shard_list_interval:
            self._listed = self.api.list_shards()
            self._listed_at = now
        return self._listed

    def ends_of(self, offset: BatchOffset) -> dict[str, BatchEnd]:
        """The batch-end record of every shard ``offset`` reads; missing, corrupt or
        other plans' ones are errors (a batch that ran recorded each; nothing is skipped)."""
        known = self._ends.setdefault(offset.batch, {})
        for shard, plan in offset.reads.items():
            if shard in known:
                continue
            where = self.store.where(offset.run, offset.batch, shard)
            end = self.store.get(offset.run, offset.batch, shard)
            if end is None:
                raise BatchEndError(
                    f"no batch-end record for batch {offset.batch}, shard {shard} of "
                    f"{offset.stream_name} at {where}: the "
                    "batch ran but its record is gone (another query with the same jobName, "
                    "or the store was cleaned); refusing to guess where the batch ended"
                )
            check_planned(end, PlannedFrom.of(offset.run, plan, offset.start), where)
            known[shard] = end
            self._note(shard, end)
        return known

    def _note(self, shard: str, end: BatchEnd) -> None:
        """Remember when the shard may read again."""
        if end.position is not None and end.position.ended:
            return
        if end.throttled:
            self._rest_until[shard] = end.at + THROTTLE_REST
        elif end.caught_up:
            if self.cutoff is not None and end.at >= self.cutoff.timestamp():
                # At its tip after the cutoff: everything that arrived before is read. (A
                # batch of an earlier query that caught up says nothing about this cutoff.)
                self._done.add(shard)
            self._rest_until[shard] = end.at + self.options.idle_poll_interval
        else:
            self._rest_until.pop(shard, None)

    def positions_after(self, offset: BatchOffset) -> dict[str, ShardPosition | None]:
        """Every shard's position once ``offset``'s batch ran."""
        ends = self.ends_of(offset)
        out: dict[str, ShardPosition | None] = {}
        for shard, plan in offset.shards.items():
            end = ends.get(shard)
            out[shard] = end.position if end is not None and end.position else plan.position
        return out

    def latest(self, start_doc: dict[str, Any] | None, total: int | None) -> BatchOffset:
        if start_doc is not None:
            start = self.parse(start_doc)
        else:
            start = self._last_planned or self.initial_offset()
        new = self._plan_after(start, total)
        self._last_planned = new
        return new

    def _plan_after(self, start: BatchOffset, total: int | None) -> BatchOffset:
        """The next batch after ``start``, or ``start`` itself: nothing to read now."""
        after = self.positions_after(start)
        listed = self.list_shards()
        self._check_vanished(listed, after)
        listed_ids = {s.shard_id for s in listed}
        parents = {s.shard_id: tuple(p for p in s.parents if p in listed_ids) for s in listed}
        shards = {s: p for s, p in after.items() if s in listed_ids}  # expired ones go
        ready = []
        for sid in sorted(listed_ids):
            pos = shards.get(sid)
            if pos is not None and pos.ended:
                continue
            if sid in shards or all(
                (pp := shards.get(p)) is not None and pp.ended for p in parents[sid]
            ):
                ready.append(sid)
                shards.setdefault(sid, None)
        pollable = self._pollable(ready)
        quotas = split_quota(pollable, self.options.max_records_per_shard, total, self._turn)
        self._turn += 1
        if not quotas:
            return start  # every shard rests, waits or ended: no batch now
        plans = {
            s: ShardPlan(pos, quotas.get(s, 0), parents.get(s, ()) if pos is None else ())
            for s, pos in shards.items()
        }
        return BatchOffset(
            start.stream_name,
            start.job_name,
            start.batch + 1,
            start.start,
            plans,
            self.cutoff,
            start.run,
        )

    def _pollable(self, ready: list[str]) -> list[str]:
        """The ready shards that may read now. availableNow waits out the rest of the
        shards not at the cutoff yet: returning ``start`` would end the query (Spark
        takes it as "nothing more") with their records before the cutoff unread."""
        while True:
            now = self._clock()
            waiting = [s for s in ready if s not in self._done]
            pollable = [s for s in waiting if self._rest_until.get(s, 0.0) <= now]
            if pollable or not waiting or self.cutoff is None:
                return pollable
            wake = min(self._rest_until[s] for s in waiting)
            log.debug("availableNow: every shard left rests; waiting %.3f s", wake - now)
            self._sleep(wake - now)

    def _check_vanished(
        self, listed: list[ShardInfo], after: dict[str, ShardPosition | None]
    ) -> None:
        listed_ids = {s.shard_id for s in listed}
        gone = sorted(
            s for s, p in after.items() if (p is None or not p.ended) and s not in listed_ids
        )
        if not gone:
            return
        msg = (
            f"shards {gone} of {self.options.stream_name} disappeared from ListShards before "
            "they were read to their end: their remaining records expired"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(msg + "; set failOnDataLoss=false to go on without them")
        log.warning("%s (failOnDataLoss=false: going on)", msg)

    def commit(self, end: BatchOffset) -> None:
        """Write the shards' positions after ``end``'s batch to the checkpoint store
        (:class:`StoreMirror`), then drop the batch-end records of earlier batches."""
        positions = {s: p for s, p in self.positions_after(end).items() if p is not None}
        self._mirror.commit(SourceOffset(end.stream_name, end.start, positions))
        try:
            self.store.forget_before(end.run, end.batch)
        except Exception as exc:  # cleanup only: the next commit tries again
            log.warning("removing batch-end records before batch %d: %s", end.batch, exc)
        for b in [b for b in self._ends if b < end.batch]:
            del self._ends[b]

    def close(self) -> None:
        self._mirror.close()
        if self._store is not None:
            self._store.close()
            self._store = None
