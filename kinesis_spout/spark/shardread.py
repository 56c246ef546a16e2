"""Reading a shard inside a Spark read task, bounded by the plan.

:func:`read_shards` reads each plan from its position until its limit in *user*
records (a KPL aggregate past the limit is cut, and the position handed on is
inside it), the tip (an answer short of what was asked and not behind; an
empty page that is behind is a gap or old data and is read past), the end of a
closed shard, or ``read_seconds``. Polling uses the same
:class:`~kinesis_spout.kinesis.getter.KinesisShardGetter` as driver reads
(throttling, 5xx and expired iterators retried with backoff inside the task);
with ``consumer = "efo"`` it subscribes instead (:mod:`kinesis_spout.kinesis.efo_read`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import TYPE_CHECKING, Any

from kinesis_spout.kinesis.efo_read import EfoTarget, read_until, subscribed_getter
from kinesis_spout.kinesis.getter import KinesisShardGetter
from kinesis_spout.records import Record, ShardBatch
from kinesis_spout.spark.arrow import format_error
from tracker import ExponentialBackoff, JitteredBackoff

if TYPE_CHECKING:
    from kinesis_spout.spark.readplan import ReadPlan, ReadResult, ReadSettings

_CLIENTS: dict[tuple[str | None, str, str | None], Any] = {}
"""boto3 clients of this executor process, per (endpoint, region)."""


def _client(settings: ReadSettings) -> Any:
    from kinesis_spout.kinesis.client import make_client

    k = (settings.endpoint_url, settings.region, settings.profile)
    client = _CLIENTS.get(k)
    if client is None:
        client = _CLIENTS[k] = make_client(
            settings.endpoint_url, settings.region, profile=settings.profile
        )
    return client


Read = tuple["ReadPlan", Callable[[list[Record]], None], "ReadResult"]
"""A read plan, what consumes its records page by page, and the result it fills."""


def read_shards(reads: list[Read], settings: ReadSettings) -> None:
    """Read every plan of a task until its limit or the end of its data, all of them
    within one deadline (``read_seconds`` from now).

    Polled shards are read *interleaved*: the one due first is polled next, so a
    throttled shard's backoff is spent polling the others, and an idle shard costs
    one GetRecords. Up to ``poll_threads`` calls are in flight at once (one per shard
    at most, :func:`_poll_together`): a call's wait for the network and the server is
    spent on the other shards' calls. Subscribed shards (``consumer = "efo"``) are read
    one after the other, each within what is left of the deadline."""
    deadline = time.monotonic() + settings.read_seconds
    polled: list[_PolledRead] = []
    for plan, consume, res in reads:
        assert plan.position is not None
        if settings.consumer_arn is not None:
            left = max(deadline - time.monotonic(), 0.0)
            read_subscribed(plan, settings, consume, res, seconds=left)
        else:
            polled.append(_PolledRead(plan, settings, consume, res))
    active = [r for r in polled if not r.done]
    if active:
        _poll_together(active, deadline, max(1, min(settings.poll_threads, len(active))))
    for r in polled:
        r.finish()


def _poll_together(active: list[_PolledRead], deadline: float, threads: int) -> None:
    """Up to ``threads`` calls in flight (``poll_threads = 1``: one at a time), at most
    one per shard, the shards due first first. A call only touches its shard's getter;
    its page is taken here, in this thread, so the consumer sees each shard's pages in
    order and one at a time. Past the deadline nothing more is asked, and the calls in
    flight are waited for."""
    waiting = list(active)  # not done, no call in flight
    flying: dict[Future[ShardBatch], _PolledRead] = {}
    turn = 0
    with ThreadPoolExecutor(threads, thread_name_prefix="kinesis-spout-poll") as pool:
        while flying or waiting:
            now = time.monotonic()
            if now >= deadline and not flying:
                break
            waiting.sort(key=lambda r: (r.getter.next_poll_at, r.turn))
            while now < deadline and waiting and len(flying) < threads:
                if waiting[0].getter.next_poll_at > now:
                    break
                r = waiting.pop(0)
                turn += 1
                r.turn = turn
                flying[pool.submit(r.fetch, now)] = r
            wake = waiting[0].getter.next_poll_at if waiting and now < deadline else None
            if not flying:
                if wake is None or wake > deadline:
                    break
                time.sleep(max(wake - now, 0.0))
                continue
            # A free thread waits for the next shard due, a full pool for a call to end.
            room = wake is not None and len(flying) < threads
            timeout = max(min(wake, deadline) - now, 0.0) if wake is not None and room else None
            done, _ = wait_futures(list(flying), timeout, FIRST_COMPLETED)
            for f in done:
                r = flying.pop(f)
                r.take(f.result())
                if not r.done:
                    waiting.append(r)


class _PolledRead:
    """One shard's GetRecords read inside a task: a page per :meth:`fetch` (in a poll
    thread) and :meth:`take` (in the task's thread)."""

    __slots__ = ("asked", "consume", "done", "getter", "remaining", "res", "settings", "turn")

    def __init__(
        self,
        plan: ReadPlan,
        settings: ReadSettings,
        consume: Callable[[list[Record]], None],
        res: ReadResult,
    ) -> None:
        self.getter = _polling_getter(plan, settings)
        self.settings = settings
        self.consume = consume
        self.res = res
        self.remaining = plan.limit
        self.turn = 0
        self.asked = 0
        self.done = self.remaining <= 0 or self.getter.ended

    def fetch(self, now: float) -> ShardBatch:
        """One GetRecords call (only this shard's getter changes: it may run in a thread
        of its own while other shards are fetched)."""
        self.asked = self.getter.limit = min(self.settings.records_per_call, self.remaining)
        return self.getter.poll(now)

    def take(self, batch: ShardBatch) -> None:
        """A page into the result and to the consumer (an error is counted; the getter's
        backoff says when to call again)."""
        getter, res, asked = self.getter, self.res, self.asked
        if batch.seconds is not None:
            res.call_seconds.append(batch.seconds)
        if batch.error is not None:
            _count_error(res, batch)
            return
        if len(batch.records) > self.remaining:  # a KPL aggregate past the limit: keep the bound
            batch = getter.cut(batch, self.remaining)
        _take_page(res, batch)
        self.consume(batch.records)
        got = len(batch.records)
        self.remaining -= got
        # The tip, by the getter's rule: an answer short of what was asked and not behind
        # (an empty page that is behind is a gap or old data: read on).
        res.caught_up = got < asked and not batch.millis_behind_latest
        self.done = self.remaining <= 0 or batch.ended or res.caught_up or getter.ended

    def finish(self) -> None:
        """The read's end into its result."""
        getter, res = self.getter, self.res
        res.position = getter.position
        res.ended = getter.ended
        res.behind = getter.millis_behind_latest
        res.calls = getter.calls


def _polling_getter(plan: ReadPlan, settings: ReadSettings) -> KinesisShardGetter:
    """The task's GetRecords getter at the plan's position (retries inside the task)."""
    from kinesis_spout.kinesis.api import KinesisApi

    pos = plan.position
    assert pos is not None
    return KinesisShardGetter(
        KinesisApi(_client(settings), settings.stream_name),
        plan.shard_id,
        backoff=JitteredBackoff(
            ExponentialBackoff(settings.throttle_backoff, cap=settings.throttle_backoff_max),
            random.Random(),
        ),
        start=pos.after,
        after_whole=pos.after_whole,
        iterator=pos.iterator,
        position=pos.initial,
        timestamp=pos.timestamp,
        limit=min(settings.records_per_call, max(plan.limit, 1)),
        max_calls_per_second=settings.max_calls_per_second,
        empty_shard_backoff=0.0,
    )


def read_subscribed(
    plan: ReadPlan,
    settings: ReadSettings,
    consume: Callable[[list[Record]], None],
    res: ReadResult,
    *,
    seconds: float | None = None,
) -> None:
    """Enhanced fan-out: subscribe at the plan's position and take events until its
    limit, the tip, the shard's end or ``seconds`` (``read_seconds`` by default)."""
    pos = plan.position
    assert pos is not None and settings.consumer_arn is not None
    target = EfoTarget(
        settings.stream_name,
        settings.region,
        settings.endpoint_url,
        settings.consumer_arn,
        settings.throttle_backoff,
        settings.throttle_backoff_max,
        settings.profile,
    )
    getter = subscribed_getter(
        target,
        plan.shard_id,
        start=pos.after,
        after_whole=pos.after_whole,
        position=pos.initial,
        timestamp=pos.timestamp,
        limit=plan.limit,
        closed=plan.closed,
    )

    def take(batch: ShardBatch) -> int:
        _take_page(res, batch)
        consume(batch.records)
        return len(batch.records)

    budget = settings.read_seconds if seconds is None else seconds
    end = read_until(getter, plan.limit, budget, take)
    for err in end.errors:
        _count_error(res, ShardBatch([], 0.0, error=err))
    res.caught_up = end.caught_up
    res.position = getter.position
    res.ended = getter.ended
    res.behind = getter.millis_behind_latest
    res.calls = end.events


def _count_error(res: ReadResult, batch: ShardBatch) -> None:
    from kinesis_spout.errors import ExpiredIteratorError, ResourceInUseError, ThrottledError

    err = batch.error
    res.last_error = format_error(err) if err is not None else None
    if isinstance(err, ThrottledError | ResourceInUseError):
        res.throttled += 1
    elif isinstance(err, ExpiredIteratorError):
        res.expired += 1
    else:
        res.transient += 1


def _take_page(res: ReadResult, batch: ShardBatch) -> None:
    if batch.child_shards:
        res.child_shards = batch.child_shards
    if batch.aggregates:
        res.aggregates += batch.aggregates
    res.skipped += batch.skipped
    res.corrupt += batch.corrupt_aggregates
    if batch.skipped_tail is not None:
        res.skipped_tail = batch.skipped_tail
    elif batch.records:
        res.skipped_tail = None  # records came after it: they cover it
