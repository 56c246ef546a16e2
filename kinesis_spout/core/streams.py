"""The streams one reader reads: a :class:`~kinesis_spout.core.shardset.ShardSet` each,
keyed by name, as KCL keys its leases by stream.

:class:`ReaderStreams` opens each stream (described, its shards listed, its identity
claimed, its checkpoints loaded and its shards adopted), finds a shard by
``(stream, shard id)`` for the acks, runs each stream's housekeeping, and lets a stream
go when it is deleted or created again under its name: a WARNING, the ``streams_gone``
metric, nothing saved (its positions belong to no stream now), the other streams go on.

A stream let go is an error only when no stream is left (a reader of one stream stops,
naming why, and saves nothing of it). At the open, a missing stream of several that has
checkpoints (it was read before, then deleted) is let go; one without any (most likely a
typo in ``streams``) is an error naming it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kinesis_spout.checkpoint.base import CheckpointStore
from kinesis_spout.config import SpoutConfig
from kinesis_spout.core.committer import Committer
from kinesis_spout.core.getters import GetterFactory
from kinesis_spout.core.partition import ShardPartition
from kinesis_spout.core.retrypolicy import RetryPolicy
from kinesis_spout.core.shardset import ShardSet
from kinesis_spout.core.startup import describe_stream, load_and_adopt
from kinesis_spout.errors import KinesisSpoutError, StreamNotFoundError, StreamRecreatedError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.metrics import MetricsCollector
from tracker import Backoff

log = logging.getLogger(__name__)

STREAMS_GONE = "streams_gone"
"""Counter: streams that stopped being read because they were deleted or recreated."""


class ReaderStreams:
    """The shard sets of a reader's streams (see the module docstring)."""

    def __init__(
        self,
        config: SpoutConfig,
        committer: Committer,
        metrics: MetricsCollector,
        clock: Callable[[], float],
        *,
        save: Callable[[ShardPartition, float], bool],
        throttle_backoff: Backoff,
        retry: RetryPolicy,
    ) -> None:
        self.config = config
        self._metrics = metrics
        self._throttle_backoff = throttle_backoff
        self.sets: dict[str, ShardSet] = {
            one.stream_name: ShardSet(
                one,
                committer,
                metrics,
                clock,
                save=save,
                throttle_backoff=throttle_backoff,
                retry=retry,
            )
            for one in config.per_stream()
        }
        """The streams still read, by name, in the config's order."""
        self.several = len(self.sets) > 1
        self.gone: dict[str, str] = {}
        """Streams no longer read, by name: why."""

    # ------------------------------------------------------------------ lookups
    def find(self, stream: str | None, shard_id: str) -> ShardPartition | None:
        """The partition of ``(stream, shard id)``; stream None: the reader's one stream."""
        if stream is None:
            if self.several:
                raise KinesisSpoutError(
                    f"a message id of shard {shard_id} names no stream: with several streams, "
                    "ack and fail the Record, or its stream_message_id ('<stream>/<id>')"
                )
            stream = self.config.stream_name
        st = self.sets.get(stream)
        return st.shards.get(shard_id) if st is not None else None

    def partitions(self) -> Iterator[ShardPartition]:
        """Every owned shard of every stream still read."""
        for st in self.sets.values():
            yield from st.shards.values()

    def ordered(self) -> list[ShardSet]:
        """The shard sets, in the config's order."""
        return list(self.sets.values())

    # ------------------------------------------------------------------ opening
    def open(
        self,
        client: Any,
        store: CheckpointStore,
        committer: Committer,
        *,
        read_here: bool,
        sleep: Callable[[float], None],
    ) -> None:
        """Open every stream (see the module docstring for one that is missing)."""
        endpoint = getattr(getattr(client, "meta", None), "endpoint_url", None)
        for name, st in list(self.sets.items()):
            cfg = st.config
            api = KinesisApi(client, cfg.stream_name, cfg.stream_arn)
            try:
                status, shards = describe_stream(
                    api,
                    cfg,
                    endpoint or cfg.endpoint_url,
                    backoff=self._throttle_backoff,
                    sleep=sleep,
                )
            except StreamNotFoundError as exc:
                if not self.several or not store.load(name):
                    raise
                self.let_go(name, f"is missing ({exc}); it was read before, then deleted")
                continue
            st.api = api
            st.getters = GetterFactory(cfg, api, self._throttle_backoff, read_here=read_here)
            st.getters.open()  # consumer = "efo": registered if absent, ACTIVE
            checkpoints = load_and_adopt(st, committer, store, api, shards)
            log.info(
                "opened stream %s (%s) at %s: %d shards, %d owned, %d with checkpoints",
                name,
                status,
                endpoint or cfg.endpoint_url,
                len(st.map),
                len(st.shards),
                len(checkpoints),
            )
        self.check_left()

    # ------------------------------------------------------------------ a stream gone
    def failed(self, stream: str, exc: Exception) -> None:
        """Reading ``stream`` raised ``exc``. A stream found deleted or created again is let
        go (another error is checked against the stream's identity first: a gone stream
        can answer with another error), which is an error only when no stream is left;
        anything else is raised."""
        st = self.sets.get(stream)
        if st is None:
            raise exc
        gone = exc if isinstance(exc, StreamNotFoundError) else None
        if gone is None and isinstance(exc, KinesisSpoutError) and st.api is not None:
            try:
                st.api.check_identity()
            except StreamNotFoundError as found:
                gone = found
        if gone is None:
            raise exc
        self.let_go(stream, gone_why(gone))

    def let_go(self, stream: str, why: str) -> None:
        """Stop reading ``stream`` (``why``: deleted, created again); the others go on.
        Nothing of it is saved. Also called by a reader elsewhere that found it gone (a
        Spark task's read). An error when no stream is left."""
        st = self.sets.pop(stream, None)
        if st is None:
            return
        log.warning("stream %s %s: it is no longer read", stream, why)
        self._metrics.increment(STREAMS_GONE, stream=stream)
        self.gone[stream] = why
        try:
            st.close()
        except Exception:
            log.exception("closing stream %s failed", stream)
        self.check_left()

    def check_left(self) -> None:
        """An error when no stream is left to read."""
        if not self.sets:
            said = "; ".join(f"{name} {why}" for name, why in self.gone.items())
            raise StreamNotFoundError(f"no stream left to read: {said}")

    # ------------------------------------------------------------------ housekeeping
    def housekeep(self, now: float) -> None:
        """Each stream's chores that are due: shards to adopt, drained shards to end, the
        shard list to refresh, lineage to check (a stream found gone is let go)."""
        for name, st in list(self.sets.items()):
            try:
                if st.to_adopt and now >= st.adopt_at:
                    st.adopt_new(())
                if st.draining:
                    st.end_drained(now)
                if now >= st.refresh_at:
                    st.refresh(now)
                elif now >= st.lineage_at:
                    st.check_lineage(now)
            except KinesisSpoutError as exc:
                self.failed(name, exc)

    def close_getters(self) -> None:
        for st in self.sets.values():
            st.close_getters()

    def close(self) -> None:
        for st in self.sets.values():
            st.close()


def gone_why(exc: StreamNotFoundError) -> str:
    """Why a stream is no longer read, as the WARNING and ``gone`` say it."""
    return str(exc) if isinstance(exc, StreamRecreatedError) else f"deleted ({exc})"


class StreamControl:
    """One stream of a reader as a shard-lease coordinator steers it
    (:class:`~kinesis_spout.coordination.control.SpoutControl`): which of its shards
    the reader owns, which it drains, and whether it reads the stream at all."""

    def __init__(self, shards: ShardSet, checkpoint: Callable[[bool], None]) -> None:
        self._set = shards
        self._checkpoint = checkpoint

    def set_owned_shards(self, shard_ids: Iterable[str] | None) -> None:
        """Read only these shards (None: all). A released shard's checkpoint is flushed
        first and its in-flight records are left to the next owner; an added shard's
        checkpoint is loaded now, and it starts once its parents ended."""
        self._set.set_owned(shard_ids)

    def drain_shards(self, shard_ids: Iterable[str]) -> None:
        """Stop reading new records from these shards ahead of giving them up (their
        retries, acks and fails go on; every other shard keeps flowing)."""
        self._set.drain(shard_ids)

    def in_flight_of(self, shard_ids: Iterable[str]) -> int:
        """Records handed out and not done on these shards (awaiting retries included)."""
        return self._set.in_flight_of(shard_ids)

    def activate(self) -> None:
        """Read the stream again after :meth:`deactivate`."""
        self._set.active = True

    def deactivate(self) -> None:
        """Stop handing out the stream's records (its acks and fails are still taken)."""
        self._set.active = False
        self._set.close_getters()

    def checkpoint(self, force: bool = False) -> None:
        """Save the reader's checkpoints that moved (every stream's: one store round)."""
        self._checkpoint(force)
