"""The offset process's planning (no PySpark): one planner over every shard, keyed by
(stream, shard).

``latestOffset`` never reads records: it lists each stream's shards (cheap, cached:
:class:`~.streams.SourceStreams`) and reads the batch-end records the last batch's
tasks left (:class:`~.shard_ends.ShardEnds`), then plans the next batch from them. A
batch's total is shared between the streams first (:func:`~.offsets.split_streams`),
then within each stream between its shards (:func:`~.offsets.split_quota`). A shard
that rests gets no quota; while every shard rests there is no new batch, so an idle
stream costs no Spark job. Under availableNow, "no new batch" ends the query, so there
the planner waits out the rests of shards not yet at the cutoff instead. The offsets
keep their JSON (:mod:`~.batch_offset`: one stream's version 2, several streams'
version 3). Lazily built by the stream reader and never pickled.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from kinesis_spout.checkpoint.batch_ends import BatchEnd
from kinesis_spout.config import InitialPosition
from kinesis_spout.kinesis.efo_read import EfoTarget
from kinesis_spout.kinesis.getter import latest_start
from kinesis_spout.records import ShardInfo, ShardKey, ShardPosition, StartPosition
from kinesis_spout.streaming.batch_offset import BatchOffset, ShardPlan, StreamsOffset
from kinesis_spout.streaming.errors import OffsetError, data_loss
from kinesis_spout.streaming.offsets import SourceOffset, split_quota, split_streams
from kinesis_spout.streaming.options import SourceOptions
from kinesis_spout.streaming.shard_ends import ShardEnds
from kinesis_spout.streaming.store_mirror import StoreMirror
from kinesis_spout.streaming.streams import SourceStreams

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Ready:
    """Every listed shard before a batch is planned."""

    positions: dict[ShardKey, ShardPosition | None]
    """Its position after the last batch (None: it starts at the offset's ``start``)."""
    parents: dict[ShardKey, tuple[str, ...]]
    """Its listed parents (of its stream)."""
    shards: list[ShardKey]
    """The shards that may read (not ended; every parent ended), sorted per stream."""


@dataclass(frozen=True)
class ShardRead:
    """One task of a batch: one shard of one stream, and what its executor needs."""

    batch: int
    stream: str
    shard_id: str
    plan: ShardPlan
    start: StartPosition
    cutoff: datetime | None = None
    efo: EfoTarget | None = None
    """``consumer=efo``: subscribe as this consumer."""
    closed: bool = False
    """ListShards says the shard is closed."""
    run: str = ""
    """The run id of the batch's offset (its batch-end records are kept per run)."""
    arn: str | None = None
    """The stream's ARN when it was given as one (the calls then name it by ARN)."""
    iterator: str | None = None
    """Where the batch before's read of the shard stopped, if it goes on exactly at
    ``plan``'s position (:attr:`~kinesis_spout.checkpoint.batch_ends.BatchEnd.iterator`)."""


R = TypeVar("R", bound=ShardRead)


class Planner:
    """The offset process over the source's shards (see the module docstring)."""

    def __init__(
        self,
        options: SourceOptions,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        streams: SourceStreams | None = None,
    ) -> None:
        self.options = options
        self._clock, self._sleep = clock, sleep
        """Wall time (batch-end records carry wall times) and the wait of availableNow."""
        self.streams = streams if streams is not None else SourceStreams(options)
        self.ends = ShardEnds(self.streams.store, options.idle_poll_interval)
        self._mirror = StoreMirror(options)
        self._initial: StreamsOffset | None = None
        self._last_planned: StreamsOffset | None = None
        self._turn = 0
        """Rotates which streams get the remainder of a batch's total."""
        self._turns = dict.fromkeys(self.streams.names, 0)
        """Per stream, rotates which of its shards get the remainder of its part."""

    @property
    def cutoff(self) -> datetime | None:
        """availableNow: records that arrived later are not read."""
        return self.ends.cutoff

    @cutoff.setter
    def cutoff(self, value: datetime | None) -> None:
        self.ends.cutoff = value

    def parse(self, doc: Any) -> StreamsOffset:
        offset = StreamsOffset.from_json(doc)
        opts, names = self.options, self.streams.names
        if set(offset.parts) != set(names) or offset.job_name != opts.job_name:
            raise OffsetError(
                f"the checkpoint location holds offsets of {_streams(offset.streams)}, job "
                f"{offset.job_name!r}, but this query reads {_streams(names)} as job "
                f"{opts.job_name!r}: use a new checkpoint location, or the same streams "
                "(streamName, streamARN) and jobName"
            )
        return offset

    def planned(self, end: StreamsOffset) -> None:
        """Remember the last planned offset: PySpark 4.0 calls ``latestOffset()``
        without a start."""
        self._last_planned = end

    # --- initial and latest offsets -------------------------------------------------
    def initial_offset(self) -> StreamsOffset:
        """Batch 0: reads nothing. LATEST is pinned to "now" (as AT_TIMESTAMP) once
        per process, so a replay of the first batch reads the same records."""
        if self._initial is None:
            opts = self.options
            self.streams.check()  # an unknown stream: an error naming it
            start = self._start()
            run = uuid.uuid4().hex  # names this checkpoint location: see batch_offset
            self._initial = StreamsOffset.of(
                BatchOffset(name, opts.job_name, 0, start, {}, run=run)
                for name in self.streams.names
            )
            log.info(
                "kinesis source on %s starts at %s (run %s)", opts.stream_name, start.to_json(), run
            )
        return self._initial

    def _start(self) -> StartPosition:
        """Where shards with no position start, the same for every stream."""
        opts = self.options
        if opts.initial_position is InitialPosition.LATEST:
            # By the server's clock (the earliest Date header of the stream checks), as
            # the Spark job pins it: a driver clock running ahead would skip what is
            # written after the start. Arrival times have millisecond resolution.
            now = latest_start(self.streams.server_time())
            now = now.replace(microsecond=now.microsecond // 1000 * 1000)
            return StartPosition(InitialPosition.AT_TIMESTAMP, now)
        if opts.initial_position is InitialPosition.AT_TIMESTAMP:
            return StartPosition(InitialPosition.AT_TIMESTAMP, opts.initial_timestamp)
        return StartPosition()

    def latest(self, start_doc: dict[str, Any] | None, total: int | None) -> StreamsOffset:
        if start_doc is not None:
            start = self.parse(start_doc)
        else:
            start = self._last_planned or self.initial_offset()
        new = self._plan_after(start, total)
        self._last_planned = new
        return new

    def _plan_after(self, start: StreamsOffset, total: int | None) -> StreamsOffset:
        """The next batch after ``start``, or ``start`` itself: nothing to read now."""
        ready = self._ready_after(start)
        quotas = self._quotas(start, self._pollable(ready.shards), total)
        self._turn += 1
        if not quotas:
            return start  # every shard rests, waits or ended: no batch now
        plans: dict[str, dict[str, ShardPlan]] = {name: {} for name in start.parts}
        for key, pos in ready.positions.items():
            parents = ready.parents.get(key, ()) if pos is None else ()
            plans[key[0]][key[1]] = ShardPlan(pos, quotas.get(key, 0), parents)
        return StreamsOffset.of(
            BatchOffset(
                name, part.job_name, part.batch + 1, part.start, plans[name], self.cutoff, part.run
            )
            for name, part in start.parts.items()
        )

    def _ready_after(self, start: StreamsOffset) -> Ready:
        """Every listed shard once ``start``'s batch ran, and which of them may read:
        not ended, and (a child) every listed parent ended."""
        after = self.positions_after(start)
        positions: dict[ShardKey, ShardPosition | None] = {}
        parents: dict[ShardKey, tuple[str, ...]] = {}
        ready: list[ShardKey] = []
        for stream in start.parts:
            listed = self.streams.shards(stream)
            mine = {shard: p for (s, shard), p in after.items() if s == stream}
            self._check_vanished(stream, listed, mine)
            ids = {s.shard_id for s in listed}
            up = {s.shard_id: tuple(p for p in s.parents if p in ids) for s in listed}
            known = {s: p for s, p in mine.items() if s in ids}  # expired ones go
            for sid in sorted(ids):
                pos = known.get(sid)
                if pos is not None and pos.ended:
                    continue
                if sid in known or all(
                    (pp := known.get(p)) is not None and pp.ended for p in up[sid]
                ):
                    ready.append((stream, sid))
                    known.setdefault(sid, None)
            positions.update(((stream, s), p) for s, p in known.items())
            parents.update(((stream, s), p) for s, p in up.items())
        return Ready(positions, parents, ready)

    def _pollable(self, shards: list[ShardKey]) -> list[ShardKey]:
        """The ready shards that may read now. availableNow waits out the rests of the
        shards not at the cutoff yet: returning ``start`` would end the query (Spark
        takes it as "nothing more") with their records before the cutoff unread."""
        waiting = self.ends.waiting(shards)
        while True:
            now = self._clock()
            pollable = self.ends.pollable(waiting, now)
            if pollable or not waiting or self.cutoff is None:
                return pollable
            wake = self.ends.wake(waiting)
            log.debug("availableNow: every shard left rests; waiting %.3f s", wake - now)
            self._sleep(wake - now)

    def _quotas(
        self, start: StreamsOffset, pollable: list[ShardKey], total: int | None
    ) -> dict[ShardKey, int]:
        """Per shard, the records the batch may take: ``total`` shared between the
        streams (:func:`split_streams`), each stream's part between its shards
        (:func:`split_quota`), every shard capped at ``maxRecordsPerShard``."""
        per_shard = self.options.max_records_per_shard
        ids: dict[str, list[str]] = {name: [] for name in start.parts}
        for stream, shard in pollable:
            ids[stream].append(shard)
        capacity = {name: len(shards) * per_shard for name, shards in ids.items()}
        shares = split_streams(capacity, total, self._turn)
        quotas: dict[ShardKey, int] = {}
        for name, shards in ids.items():
            mine = split_quota(shards, per_shard, shares[name], self._turns[name])
            if mine or len(ids) == 1:
                self._turns[name] += 1  # rotates only when served: no shard of it starves
            quotas.update(((name, s), q) for s, q in mine.items())
        return quotas

    def _check_vanished(
        self, stream: str, listed: list[ShardInfo], after: dict[str, ShardPosition | None]
    ) -> None:
        ids = {s.shard_id for s in listed}
        gone = sorted(s for s, p in after.items() if (p is None or not p.ended) and s not in ids)
        if gone:
            data_loss(
                f"shards {gone} of {stream} disappeared from ListShards before they were "
                "read to their end: their remaining records expired",
                self.options.fail_on_data_loss,
            )

    # --- a batch's tasks and its commit ---------------------------------------------
    def reads(self, start: StreamsOffset, offset: StreamsOffset, kind: type[R]) -> list[R]:
        """The tasks of ``offset``'s batch (as ``kind``): one per shard with a quota, each
        with the iterator where ``start``'s batch (the one before) left its shard, when it
        goes on exactly at the shard's planned position (a hint, never a store call)."""
        out = []
        for name in offset.streams:
            part = offset.parts[name]
            efo, closed = self.streams.efo_target(name), self.streams.closed(name)
            log.debug("batch %d: %d shards of %s", part.batch, len(part.reads), name)
            for shard, plan in part.reads.items():
                out.append(
                    kind(
                        part.batch,
                        name,
                        shard,
                        plan,
                        part.start,
                        part.cutoff,
                        efo,
                        shard in closed,
                        part.run,
                        self.streams.arn(name),
                        self._iterator(start, (name, shard), plan),
                    )
                )
        return out

    def _iterator(self, start: StreamsOffset, key: ShardKey, plan: ShardPlan) -> str | None:
        """Where ``start``'s batch left the shard, as an iterator, if ``plan`` goes on there."""
        end = self.ends.known(start.batch, key)
        before = start.parts.get(key[0])
        was = before.shards.get(key[1]) if before is not None else None
        if end is None or was is None or plan.position != _after(end, was):
            return None
        return end.iterator

    def positions_after(self, offset: StreamsOffset) -> dict[ShardKey, ShardPosition | None]:
        """Every shard's position once ``offset``'s batch ran."""
        ends = self.ends.of(offset)
        return {
            (name, shard): _after(ends.get((name, shard)), plan)
            for name, part in offset.parts.items()
            for shard, plan in part.shards.items()
        }

    def commit(self, end: StreamsOffset) -> None:
        """Write each shard's position after ``end``'s batch to the checkpoint store
        (:class:`StoreMirror`), then drop the batch-end records of earlier batches."""
        after = self.positions_after(end)
        for name, part in end.parts.items():
            positions = {s: p for (n, s), p in after.items() if n == name and p is not None}
            self._mirror.commit(SourceOffset(name, part.start, positions))
        self.ends.forget_before(end)

    def close(self) -> None:
        self._mirror.close()
        self.streams.close()


def _after(end: BatchEnd | None, plan: ShardPlan) -> ShardPosition | None:
    """A shard's position once the batch that planned it ``plan`` ran and recorded
    ``end``: where the read stopped, or (nothing read, or not recorded) where it began."""
    return end.position if end is not None and end.position else plan.position


def _streams(names: list[str]) -> str:
    """``stream 'a'`` or ``streams 'a', 'b'``, for messages."""
    if len(names) == 1:
        return f"stream {names[0]!r}"
    return "streams " + ", ".join(repr(n) for n in names)
