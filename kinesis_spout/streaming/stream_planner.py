"""One stream's part of the streaming source's offset process (no PySpark).

:class:`StreamPlanner` keeps what the :class:`~kinesis_spout.streaming.planner.Planner`
knows of one stream: its Kinesis calls (by ARN when given as one), its shard listing, the
batch-end records its tasks left (under the stream's name, as
:func:`~kinesis_spout.checkpoint.factory.open_batch_ends` keys them), and which of its
shards rest or reached the availableNow cutoff. It says which shards may read
(:class:`Ready`) and builds the stream's part of a batch from the quotas the planner
gives it; the planner shares a batch between the streams.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from kinesis_spout.checkpoint.batch_ends import (
    BatchEnd,
    BatchEndStore,
    PlannedFrom,
    check_planned,
)
from kinesis_spout.config.streams import StreamSpec
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.kinesis.efo_read import EfoTarget
from kinesis_spout.records import ShardInfo, ShardPosition
from kinesis_spout.streaming.batch_offset import BatchOffset, ShardPlan
from kinesis_spout.streaming.errors import DataLossError
from kinesis_spout.streaming.options import SourceOptions

log = logging.getLogger(__name__)

THROTTLE_REST = 1.0
"""Seconds a shard whose last read was throttled waits for its next quota."""


@dataclass(frozen=True, slots=True)
class Ready:
    """One stream's shards before a batch is planned."""

    positions: dict[str, ShardPosition | None]
    """Every listed shard's position after the last batch (None: it starts at ``start``)."""
    parents: dict[str, tuple[str, ...]]
    """The listed parents of each listed shard."""
    shards: list[str]
    """The shards that may read (not ended; every parent ended), sorted."""


class StreamPlanner:
    """One stream's part of the offset process: its Kinesis calls, shard listing,
    batch-end records (under its name), rests and availableNow progress."""

    def __init__(
        self, options: SourceOptions, spec: StreamSpec, store: BatchEndStore | None = None
    ) -> None:
        self.options, self.spec = options, spec
        self.name = spec.name
        self.cutoff: datetime | None = None
        self._api: KinesisApi | None = None
        self._store = store
        self._listed: list[ShardInfo] = []
        self._listed_at = float("-inf")
        self._ends: dict[int, dict[str, BatchEnd]] = {}
        self._unread: dict[int, set[str]] = {}
        """Per batch, the shards whose read was not recorded (:meth:`_unrecorded`)."""
        self._rest_until: dict[str, float] = {}
        """Wall time before which a shard gets no quota (it was at its tip)."""
        self._done: set[str] = set()
        """availableNow: shards read up to the cutoff."""
        self.turn = 0
        """Rotates which shards get the remainder of this stream's part."""
        self._efo: EfoTarget | None = None

    @property
    def api(self) -> KinesisApi:
        if self._api is None:
            opts = self.options
            client = make_client(opts.endpoint_url, opts.region)
            self._api = KinesisApi(client, self.name, self.spec.arn)
        return self._api

    @property
    def store(self) -> BatchEndStore:
        if self._store is None:
            from kinesis_spout.checkpoint.factory import open_batch_ends

            opts = self.options
            assert opts.checkpoint_store is not None
            self._store = open_batch_ends(
                opts.checkpoint_store, opts.job_name, self.name, opts.zk_auth, region=opts.region
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
            self._efo = EfoTarget(self.name, opts.region, opts.endpoint_url, consumer.arn)
        return self._efo

    def closed_shards(self) -> frozenset[str]:
        """The shards the last ListShards answer gave an ending sequence number."""
        return frozenset(s.shard_id for s in self._listed if s.is_closed)

    def list_shards(self) -> list[ShardInfo]:
        now = time.monotonic()
        if now - self._listed_at >= self.options.shard_list_interval:
            self._listed = self.api.list_shards()
            self._listed_at = now
        return self._listed

    def ends_of(self, offset: BatchOffset) -> dict[str, BatchEnd]:
        """The batch-end record of every shard ``offset`` read; corrupt or other plans'
        ones are errors. A shard with no record is left out: its read never ran (see
        :meth:`_unrecorded`), so it keeps the position the batch planned it from."""
        known = self._ends.setdefault(offset.batch, {})
        unread = self._unread.setdefault(offset.batch, set())
        missing = []
        for shard, plan in offset.reads.items():
            if shard in known or shard in unread:
                continue
            where = self.store.where(offset.run, offset.batch, shard)
            end = self.store.get(offset.run, offset.batch, shard)
            if end is None:
                unread.add(shard)
                missing.append(shard)
                continue
            check_planned(end, PlannedFrom.of(offset.run, plan, offset.start), where)
            known[shard] = end
            self._note(shard, end, offset.cutoff)
        if missing:
            self._unrecorded(offset, missing)
        return known

    def _unrecorded(self, offset: BatchOffset, shards: list[str]) -> None:
        """Shards of a batch Spark ran without their read recorded. A task records before
        it returns any record, so their tasks never ran: the batch's function did not
        compute every partition (``df.show()``, ``df.head()``, ``limit(n)``, an early
        return), and no record of theirs reached it. The next batch reads them again from
        the same position. (Were the records removed from the store instead, a record
        of theirs may also be in this batch: at-least-once.) Decided once per batch, so
        the next batch's plan and this batch's commit agree."""
        log.warning(
            "batch %d of %s: no read recorded for shard(s) %s: their partitions did not run "
            "(the batch's function did not read the whole batch) or their records were "
            "removed from the store (the first one's: %s); the next batch reads them again "
            "from where batch %d started them",
            offset.batch,
            self.name,
            ", ".join(shards),
            self.store.where(offset.run, offset.batch, shards[0]),
            offset.batch,
        )

    def _note(self, shard: str, end: BatchEnd, read_cutoff: datetime | None) -> None:
        """Remember when the shard may read again (``read_cutoff``: the cutoff its read
        stopped at, if any)."""
        if end.position is not None and end.position.ended:
            return
        if end.throttled:
            self._rest_until[shard] = end.at + THROTTLE_REST
        elif end.caught_up:
            cutoff = self.cutoff
            if (
                cutoff is not None
                and end.at >= cutoff.timestamp()
                and (read_cutoff is None or read_cutoff >= cutoff)
            ):
                # At its tip after the cutoff: everything that arrived before is read. (A
                # batch of an earlier query that caught up says nothing about this cutoff,
                # nor does one that stopped at an earlier query's older cutoff.)
                self._done.add(shard)
            self._rest_until[shard] = end.at + self.options.idle_poll_interval
        else:
            self._rest_until.pop(shard, None)

    def iterators(self, start: BatchOffset, offset: BatchOffset) -> dict[str, str]:
        """Per shard ``offset`` reads, the iterator where its read in ``start``'s batch
        (the one before) stopped, when it goes on exactly at ``offset``'s position for the
        shard (:attr:`BatchEnd.iterator`). Only the records :meth:`ends_of` already read:
        a hint, never a store call."""
        known = self._ends.get(start.batch, {})
        out = {}
        for shard, plan in offset.reads.items():
            end = known.get(shard)
            before = start.shards.get(shard)
            if end is None or end.iterator is None or before is None:
                continue
            if plan.position == _after(end, before):
                out[shard] = end.iterator
        return out

    def positions_after(self, offset: BatchOffset) -> dict[str, ShardPosition | None]:
        """Every shard's position once ``offset``'s batch ran."""
        ends = self.ends_of(offset)
        out: dict[str, ShardPosition | None] = {}
        for shard, plan in offset.shards.items():
            out[shard] = _after(ends.get(shard), plan)
        return out

    def ready_after(self, start: BatchOffset) -> Ready:
        """The stream's shards once ``start``'s batch ran, and which of them may read:
        not ended, and (a child) every listed parent ended."""
        after = self.positions_after(start)
        listed = self.list_shards()
        self._check_vanished(listed, after)
        listed_ids = {s.shard_id for s in listed}
        parents = {s.shard_id: tuple(p for p in s.parents if p in listed_ids) for s in listed}
        positions = {s: p for s, p in after.items() if s in listed_ids}  # expired ones go
        ready = []
        for sid in sorted(listed_ids):
            pos = positions.get(sid)
            if pos is not None and pos.ended:
                continue
            if sid in positions or all(
                (pp := positions.get(p)) is not None and pp.ended for p in parents[sid]
            ):
                ready.append(sid)
                positions.setdefault(sid, None)
        return Ready(positions, parents, ready)

    def waiting(self, ready: Ready) -> list[str]:
        """The ready shards not yet at the availableNow cutoff (all of them without one)."""
        return [s for s in ready.shards if s not in self._done]

    def pollable(self, waiting: Iterable[str], now: float) -> list[str]:
        """The shards of ``waiting`` that do not rest at wall time ``now``."""
        return [s for s in waiting if self._rest_until.get(s, 0.0) <= now]

    def wake(self, waiting: Iterable[str]) -> float:
        """When the first of ``waiting`` (every one resting) may read again."""
        return min(self._rest_until[s] for s in waiting)

    def plan(self, start: BatchOffset, ready: Ready, quotas: dict[str, int]) -> BatchOffset:
        """This stream's part of the batch after ``start``: its shards with their quotas."""
        plans = {
            s: ShardPlan(pos, quotas.get(s, 0), ready.parents.get(s, ()) if pos is None else ())
            for s, pos in ready.positions.items()
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
            f"shards {gone} of {self.name} disappeared from ListShards before "
            "they were read to their end: their remaining records expired"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(msg + "; set failOnDataLoss=false to go on without them")
        log.warning("%s (failOnDataLoss=false: going on)", msg)

    def forget_before(self, end: BatchOffset) -> None:
        """Drop the batch-end records of the batches before ``end``'s (committed)."""
        try:
            self.store.forget_before(end.run, end.batch)
        except Exception as exc:  # cleanup only: the next commit tries again
            log.warning(
                "removing batch-end records of %s before batch %d: %s", self.name, end.batch, exc
            )
        for b in [b for b in self._ends if b < end.batch]:
            del self._ends[b]
        for b in [b for b in self._unread if b < end.batch]:
            del self._unread[b]

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def _after(end: BatchEnd | None, plan: ShardPlan) -> ShardPosition | None:
    """A shard's position once the batch that planned it ``plan`` ran and recorded
    ``end``: where the read stopped, or (nothing read, or not recorded) where it began."""
    return end.position if end is not None and end.position else plan.position
