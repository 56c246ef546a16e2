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

Several streams: :class:`Planner` holds one :class:`~.stream_planner.StreamPlanner` per stream (its
Kinesis calls, listing, batch-end records and rests, under its name) and plans one batch
over all of them (:class:`~.batch_offset.StreamsOffset`): the batch's total is shared
between the streams first (:func:`~.offsets.split_streams`), then within each stream
between its shards (:func:`~.offsets.split_quota`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from kinesis_spout.config import InitialPosition
from kinesis_spout.kinesis.getter import latest_start
from kinesis_spout.records import StartPosition
from kinesis_spout.streaming.batch_offset import BatchOffset, StreamsOffset
from kinesis_spout.streaming.errors import OffsetError
from kinesis_spout.streaming.offsets import SourceOffset, split_quota, split_streams
from kinesis_spout.streaming.options import SourceOptions
from kinesis_spout.streaming.store_mirror import StoreMirror
from kinesis_spout.streaming.stream_planner import THROTTLE_REST, Ready, StreamPlanner

log = logging.getLogger(__name__)

__all__ = ["THROTTLE_REST", "Planner", "Ready", "StreamPlanner"]


class Planner:
    """State of the offset process over the source's streams: lazily built, never pickled."""

    def __init__(
        self,
        options: SourceOptions,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.options = options
        self._clock, self._sleep = clock, sleep
        """Wall time (batch-end records carry wall times) and the wait of availableNow."""
        self.parts = {s.name: StreamPlanner(options, s) for s in options.streams}
        """Each stream's planner, by name, in the order the options give them."""
        self._cutoff: datetime | None = None
        self._mirror = StoreMirror(options)
        self._initial: StreamsOffset | None = None
        self._last_planned: StreamsOffset | None = None
        self._turn = 0

    @property
    def cutoff(self) -> datetime | None:
        """availableNow: records that arrived later are not read."""
        return self._cutoff

    @cutoff.setter
    def cutoff(self, value: datetime | None) -> None:
        self._cutoff = value
        for part in self.parts.values():
            part.cutoff = value

    def parse(self, doc: Any) -> StreamsOffset:
        offset = StreamsOffset.from_json(doc)
        opts = self.options
        if set(offset.parts) != set(self.parts) or offset.job_name != opts.job_name:
            raise OffsetError(
                f"the checkpoint location holds offsets of {_streams(offset.streams)}, job "
                f"{offset.job_name!r}, but this query reads {_streams(list(self.parts))} as job "
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
            for part in self.parts.values():
                part.api.check_stream()  # an unknown stream: an error naming it
            start = self._start()
            run = uuid.uuid4().hex  # names this checkpoint location: see batch_offset
            self._initial = StreamsOffset.of(
                BatchOffset(name, opts.job_name, 0, start, {}, run=run) for name in self.parts
            )
            log.info(
                "kinesis source on %s starts at %s (run %s)", opts.stream_name, start.to_json(), run
            )
        return self._initial

    def _start(self) -> StartPosition:
        """Where shards with no position start, the same for every stream."""
        opts = self.options
        if opts.initial_position is InitialPosition.LATEST:
            # By the server's clock (the Date header of the stream checks just made, the
            # earliest of them), as the Spark job pins it: a driver clock running ahead
            # would skip what is written after the start.
            known = [t for part in self.parts.values() if (t := part.api.server_time)]
            now = latest_start(min(known, default=None))
            # Kinesis arrival times have millisecond resolution: round down.
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
        ready = {name: self.parts[name].ready_after(part) for name, part in start.parts.items()}
        quotas = self._quotas(self._pollable(ready), total)
        self._turn += 1
        if not any(quotas.values()):
            return start  # every shard rests, waits or ended: no batch now
        return StreamsOffset.of(
            self.parts[name].plan(part, ready[name], quotas[name])
            for name, part in start.parts.items()
        )

    def _pollable(self, ready: dict[str, Ready]) -> dict[str, list[str]]:
        """Per stream, the ready shards that may read now. availableNow waits out the rest
        of the shards not at the cutoff yet: returning ``start`` would end the query (Spark
        takes it as "nothing more") with their records before the cutoff unread."""
        waiting = {name: self.parts[name].waiting(r) for name, r in ready.items()}
        while True:
            now = self._clock()
            pollable = {name: self.parts[name].pollable(w, now) for name, w in waiting.items()}
            if any(pollable.values()) or not any(waiting.values()) or self.cutoff is None:
                return pollable
            wake = min(self.parts[name].wake(w) for name, w in waiting.items() if w)
            log.debug("availableNow: every shard left rests; waiting %.3f s", wake - now)
            self._sleep(wake - now)

    def _quotas(
        self, pollable: dict[str, list[str]], total: int | None
    ) -> dict[str, dict[str, int]]:
        """Per stream and shard, the records the batch may take: ``total`` shared between
        the streams (:func:`split_streams`), each stream's part between its shards
        (:func:`split_quota`), every shard capped at ``maxRecordsPerShard``."""
        per_shard = self.options.max_records_per_shard
        capacity = {name: len(ids) * per_shard for name, ids in pollable.items()}
        shares = split_streams(capacity, total, self._turn)
        quotas = {}
        for name, ids in pollable.items():
            part = self.parts[name]
            quotas[name] = split_quota(ids, per_shard, shares[name], part.turn)
            if quotas[name] or len(self.parts) == 1:
                part.turn += 1  # rotates only when served: no shard of it starves
        return quotas

    def commit(self, end: StreamsOffset) -> None:
        """Write each stream's shard positions after ``end``'s batch to the checkpoint
        store (:class:`StoreMirror`), then drop the batch-end records of earlier batches."""
        for name, part in end.parts.items():
            planner = self.parts[name]
            after = planner.positions_after(part)
            positions = {s: p for s, p in after.items() if p is not None}
            self._mirror.commit(SourceOffset(name, part.start, positions))
            planner.forget_before(part)

    def close(self) -> None:
        self._mirror.close()
        for part in self.parts.values():
            part.close()


def _streams(names: list[str]) -> str:
    """``stream 'a'`` or ``streams 'a', 'b'``, for messages."""
    if len(names) == 1:
        return f"stream {names[0]!r}"
    return "streams " + ", ".join(repr(n) for n in names)
