"""An executor's read of one shard for one batch: once, then recorded (first wins).

The first attempt of a task reads the shard from the batch's start position up to its
quota, its tip, its end or the availableNow cutoff, keeping the records; **before
returning any** it records where it stopped under (batch, shard). An attempt that finds
another attempt's end (a retry after a lost executor, a speculative copy) returns
exactly that range instead, read again by GetRecords. So every attempt of a batch
returns the same records, and a first attempt fetches each of them once. The mechanism
is the Spark job's too (:mod:`~kinesis_spout.checkpoint.recorded_read`); this module
gives it the source's reads (:mod:`~kinesis_spout.streaming.shard_reader`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from kinesis_spout.checkpoint.batch_ends import BatchEnd, BatchEndStore, PlannedFrom
from kinesis_spout.checkpoint.recorded_read import RecordedAt, read_once
from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.efo_read import EfoTarget
from kinesis_spout.processinfo import reader_id
from kinesis_spout.records import Record, StartPosition
from kinesis_spout.retrying import never, retrying
from kinesis_spout.streaming.batch_offset import ShardPlan
from kinesis_spout.streaming.shard_reader import (
    ReadAhead,
    read_fresh,
    read_fresh_subscribed,
    read_range,
)
from tracker import ExponentialBackoff

log = logging.getLogger(__name__)

READ_ATTEMPTS = 6
"""Tries of a first read that Kinesis throttles or fails before nothing is recorded as read."""

Pages = list[list[Record]]


def read_batch_shard(
    api: KinesisApi,
    store: BatchEndStore,
    batch: int,
    shard_id: str,
    plan: ShardPlan,
    start: StartPosition,
    *,
    run: str,
    fetch: int,
    cutoff: datetime | None = None,
    fail_on_data_loss: bool = True,
    sleep: Callable[[float], None] = time.sleep,
    efo: EfoTarget | None = None,
    closed: bool = False,
    iterator: str | None = None,
) -> Iterator[list[Record]]:
    """The records of ``shard_id`` in ``batch``, page by page (see the module docstring).

    With ``efo`` the first read subscribes (``closed``: ListShards says the shard is
    closed); a replay of a recorded range reads it with GetRecords. ``run``: the run id
    of the batch's offset. ``iterator``: where the previous batch's read of the shard
    stopped (:attr:`BatchEnd.iterator`), for the reads by GetRecords to go on from."""
    at = RecordedAt(store, run, batch, shard_id, PlannedFrom.of(run, plan, start))
    read = _Read(api, shard_id, plan, start, fetch, cutoff, efo, closed, iterator)

    def first() -> tuple[Pages, BatchEnd]:
        records, end = _first_read(read, at.planned, sleep)
        return [records[i : i + fetch] for i in range(0, len(records), fetch)], end

    def again(recorded: BatchEnd) -> Pages:
        rng = at.range_of(recorded)
        if rng is None:
            return []
        replayed = read_range(
            api, rng, fetch=fetch, fail_on_data_loss=fail_on_data_loss, iterator=iterator
        )
        return list(replayed)

    yield from read_once(at, first, again)


@dataclass(frozen=True, slots=True)
class _Read:
    """A first read's parameters."""

    api: KinesisApi
    shard_id: str
    plan: ShardPlan
    start: StartPosition
    fetch: int
    cutoff: datetime | None
    efo: EfoTarget | None
    closed: bool
    iterator: str | None

    def once(self) -> tuple[list[Record], ReadAhead]:
        plan = self.plan
        if self.efo is not None:
            return read_fresh_subscribed(
                self.efo,
                self.shard_id,
                plan.position,
                self.start,
                plan.quota,
                cutoff=self.cutoff,
                closed=self.closed,
            )
        return read_fresh(
            self.api,
            self.shard_id,
            plan.position,
            self.start,
            plan.quota,
            fetch=self.fetch,
            cutoff=self.cutoff,
            iterator=self.iterator,
        )


def _first_read(
    read: _Read, planned: PlannedFrom, sleep: Callable[[float], None]
) -> tuple[list[Record], BatchEnd]:
    """The first read (:func:`_read_once`) and the batch-end record it makes."""
    records, ahead = _read_once(read, sleep)
    return records, BatchEnd(
        ahead.position,
        caught_up=ahead.idle,
        throttled=ahead.error is not None,
        at=time.time(),
        children=ahead.children,
        reader=reader_id(),
        planned=planned,
        iterator=ahead.next_iterator,
    )


def _read_once(read: _Read, sleep: Callable[[float], None]) -> tuple[list[Record], ReadAhead]:
    """Read up to the quota; a throttled or failing read is tried again with backoff
    while it got nothing (what it got is exact and kept), :data:`READ_ATTEMPTS` tries
    in all; an error it raises is not retried."""
    return retrying(
        f"read of {read.api.stream_name}/{read.shard_id}",
        read.once,
        backoff=ExponentialBackoff(0.2, cap=2.0),
        attempts=READ_ATTEMPTS,
        retriable=never,
        again=_got_nothing,
        sleep=sleep,
        logger=log,
    )


def _got_nothing(got: tuple[list[Record], ReadAhead]) -> KinesisSpoutError | None:
    """The error that cut a read short before it got any record (None: keep it)."""
    records, ahead = got
    return None if records else ahead.error
