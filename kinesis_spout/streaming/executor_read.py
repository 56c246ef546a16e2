"""An executor's read of one shard for one batch: once, then recorded (first wins).

The first attempt of a task reads the shard from the batch's start position
up to its quota, its tip, its end or the availableNow cutoff, keeping the
records; **before returning any** it records where it stopped
(:mod:`~kinesis_spout.checkpoint.batch_ends`). If an earlier or concurrent attempt (a retry after a
lost executor, a speculative copy) recorded first, the task returns exactly
the recorded range instead, read again with
:func:`~kinesis_spout.streaming.shard_reader.read_range`. So every attempt of
a batch returns the same records, and a first attempt fetches each of them once.

A record made for another plan (another run's batch of the same number) is
refused, never used; an attempt of a batch whose records were already removed
(committed: a leftover) fails without recording anything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from kinesis_spout.checkpoint.batch_ends import (
    BatchEnd,
    BatchEndStore,
    PlannedFrom,
    check_planned,
    removed_error,
)
from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.efo_read import EfoTarget
from kinesis_spout.processinfo import reader_id
from kinesis_spout.records import Record, StartPosition
from kinesis_spout.retrying import never, retrying
from kinesis_spout.streaming.batch_offset import ShardPlan
from kinesis_spout.streaming.offsets import ShardRange
from kinesis_spout.streaming.shard_reader import ReadAhead, read_fresh, read_range
from kinesis_spout.streaming.subscribed_read import read_fresh_subscribed
from tracker import ExponentialBackoff

log = logging.getLogger(__name__)

READ_ATTEMPTS = 6
"""Tries of a first read that Kinesis throttles or fails before nothing is recorded as read."""


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
    expected = PlannedFrom.of(run, plan, start)
    where = store.where(run, batch, shard_id)
    floor = store.floor(run)
    if batch < floor:
        raise removed_error(where, batch, floor)
    recorded = store.get(run, batch, shard_id)
    if recorded is None:
        read = _Read(api, shard_id, plan, start, fetch, cutoff, efo, closed, iterator)
        records, mine = _first_read(read, expected, sleep)
        recorded = store.record(run, batch, shard_id, mine)
        if recorded == mine:
            for i in range(0, len(records), fetch):
                yield records[i : i + fetch]
            return
        log.info(
            "batch %d, %s: another attempt recorded its end first (%s records); returning "
            "that range",
            batch,
            shard_id,
            recorded.count,
        )
    check_planned(recorded, expected, where)
    if recorded.position is None or recorded.count == 0:
        return
    after = plan.position if plan.position is not None and plan.position.sequence else None
    rng = ShardRange(shard_id, after, start, recorded.position)
    yield from read_range(
        api, rng, fetch=fetch, fail_on_data_loss=fail_on_data_loss, iterator=iterator
    )


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
