"""A reader's start: the stream checked and its shards listed, riding out throttling;
the stored checkpoints loaded (and pinned) and the owned shards adopted."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from kinesis_spout.checkpoint.base import CheckpointStore
from kinesis_spout.config import SpoutConfig
from kinesis_spout.core.committer import Committer
from kinesis_spout.core.shardset import ShardSet
from kinesis_spout.errors import EndpointUnreachableError, ThrottledError, TransientKinesisError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.getter import latest_start
from kinesis_spout.records import Checkpoint, ShardInfo
from kinesis_spout.retrying import retrying
from tracker import Backoff

log = logging.getLogger(__name__)

_T = TypeVar("_T")
#: Tries of each Kinesis call at the start when throttled or dropped.
STARTUP_ATTEMPTS = 6


def describe_stream(
    api: KinesisApi,
    config: SpoutConfig,
    endpoint: str | None,
    *,
    backoff: Backoff,
    sleep: Callable[[float], None],
) -> tuple[str, list[ShardInfo]]:
    """``(status, shards)`` of the stream; an unreachable endpoint is an error naming
    the endpoint, the stream and the region."""
    try:
        status = startup_call(api.check_stream, config.stream_name, backoff, sleep)
        shards = startup_call(api.list_shards, config.stream_name, backoff, sleep)
    except EndpointUnreachableError as exc:
        raise EndpointUnreachableError(
            f"cannot reach Kinesis at {endpoint} (stream {config.stream_name!r}, region "
            f"{config.region}); check endpoint_url / AWS_ENDPOINT_URL_KINESIS: {exc}"
        ) from exc
    return status, shards


def startup_call(
    fn: Callable[[], _T], stream: str, backoff: Backoff, sleep: Callable[[float], None]
) -> _T:
    """``fn()``, tried again after a backoff when Kinesis throttles or drops the call
    (a busy stream must not stop a job at start), :data:`STARTUP_ATTEMPTS` tries in
    all. Only the start waits like this; an unreachable endpoint or an unknown stream
    fails at once."""
    return retrying(
        f"opening {stream}",
        fn,
        backoff=backoff,
        attempts=STARTUP_ATTEMPTS,
        retriable=_throttled_or_dropped,
        sleep=sleep,
        level=logging.WARNING,
        logger=log,
    )


def _throttled_or_dropped(exc: Exception) -> bool:
    return isinstance(exc, ThrottledError | TransientKinesisError)


def claim_identity(store: CheckpointStore, api: KinesisApi, config: SpoutConfig) -> None:
    """With ``streams`` configured, record the stream's creation time as its checkpoints'
    identity (as KCL's multi-stream mode keys a stream by name and creation time; a job
    of ``stream_name`` alone keys by name, as before and as KCL's single-stream mode).
    A stream deleted and created again under its name is then another stream: the store
    moves the old checkpoints aside and this reader starts the new stream's shards at
    ``initial_position``, never from the old positions."""
    if not config.streams or api.created is None:  # or an endpoint that does not say
        return
    old = store.claim_stream(api.stream_name, api.created.isoformat())
    if old is not None:
        log.warning(
            "stream %s was created again (at %s; the stored checkpoints are of the stream "
            "created at %s): they are kept aside, not resumed; its shards start at the "
            "initial position",
            api.stream_name,
            api.created.isoformat(),
            old,
        )


def load_and_adopt(
    shard_set: ShardSet,
    committer: Committer,
    store: CheckpointStore,
    api: KinesisApi,
    shards: list[ShardInfo],
) -> dict[str, Checkpoint]:
    """Load (and pin) the checkpoints, adopt the owned shards, start the ready ones. A
    stream created again since its checkpoints were written starts fresh: its identity is
    claimed (:func:`claim_identity`) *before* the load, so a reader of the job that claims
    it in between has already moved the old checkpoints aside when this one loads."""
    claim_identity(store, api, shard_set.config)
    checkpoints = store.load(shard_set.config.stream_name)
    shard_set.map.update(shards)
    # pinned starts of a first open at LATEST/AT_TIMESTAMP
    latest = latest_start(api.server_time)
    owned = [s for s in shard_set.map.ids() if shard_set.owns(s)]
    checkpoints = committer.pin_start(
        shard_set.config, checkpoints, owned, shard_set.map.has_known_parent, latest
    )
    for cp in checkpoints.values():
        if cp.shard_end:
            shard_set.map.mark_ended(cp.shard_id)
    for shard_id in shard_set.map.ids():
        if shard_set.owns(shard_id):
            shard_set.adopt(shard_id, checkpoints.get(shard_id))
    shard_set.start_ready()
    return checkpoints
