"""The ZooKeeper store's checkpoint round: many shards saved with their calls in flight
together.

A round (every shard that moved since the last one) is a node per shard. Saved one
after the other, each costs two round trips to the ensemble (a read, then a
compare-and-set transaction), so 1,000 shards take about a second on a local server and
longer over a network. Here every read is sent before the first answer is waited for,
then every transaction: two round trips for the whole round.

Only the plain case is pipelined: the node was read, the new checkpoint is after it, and
the transaction wrote it. Anything else for a shard (no lease, a checkpoint equal to the
stored one, a concurrent writer, an operator's reset, a corrupt node, a refused or lost
call) leaves the shard to the store's one-shard ``save``, which reads again and gives
the same outcome a round saved shard by shard would have had. A transaction that failed
wrote nothing, so retrying it through ``save`` never writes twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from kazoo.exceptions import KazooException, NoNodeError

from kinesis_spout.checkpoint.base import check_forward, save_each
from kinesis_spout.checkpoint.resets import ResetFence
from kinesis_spout.checkpoint.zk_fencing import LeaseFence
from kinesis_spout.checkpoint.zk_nodes import ZkNodes
from kinesis_spout.errors import CheckpointError, StaleCheckpointError
from kinesis_spout.records import Checkpoint


def save_round(
    nodes: ZkNodes,
    fence: LeaseFence,
    resets: ResetFence,
    now: Callable[[], datetime],
    checkpoints: Sequence[Checkpoint],
    save: Callable[[Checkpoint], Checkpoint],
) -> list[Checkpoint | CheckpointError]:
    """``save_many`` of the ZooKeeper store (see the module docstring): each outcome in
    its checkpoint's place; ``checkpoints`` carry the store's job name and owner.

    The first call that fails other than as a refusal of its shard (the connection, a
    corrupt node, the store closed) stops the pipeline: that shard and every later one
    go through ``save`` in order, which raises or fails each at once, as a round saved
    shard by shard would have. A shard listed twice goes through ``save`` each time."""
    out: list[Checkpoint | CheckpointError | None] = [None] * len(checkpoints)
    try:
        for stream in sorted({cp.stream_name for cp in checkpoints}):
            nodes.check_usable(f"checkpoint round of {stream}")
            nodes.ensure_path(nodes.paths.stream(stream))
    except CheckpointError:
        return save_each(save, checkpoints)  # each shard hears why on its own
    keys = Counter((cp.stream_name, cp.shard_id) for cp in checkpoints)
    reads = [
        _send_read(nodes, cp) if keys[(cp.stream_name, cp.shard_id)] == 1 else None
        for cp in checkpoints
    ]
    writes: list[tuple[Any, Checkpoint] | None] = [None] * len(checkpoints)
    try:
        for i, read in enumerate(reads):
            if read is not None:
                writes[i] = _send_write(nodes, fence, resets, now, checkpoints[i], read)
    except (CheckpointError, KazooException):
        pass  # the shard that failed and those after it go through save()
    try:
        for i, write in enumerate(writes):
            if write is not None:
                out[i] = _written(nodes, *write)
    except CheckpointError:
        pass  # the connection went: the rest fail at once in save()
    rest = [i for i, done in enumerate(out) if done is None]
    for i, outcome in zip(rest, save_each(save, [checkpoints[i] for i in rest]), strict=True):
        out[i] = outcome
    done = [o for o in out if o is not None]
    assert len(done) == len(checkpoints), "every checkpoint of a round has its outcome"
    return done


def _send_read(nodes: ZkNodes, cp: Checkpoint) -> Any | None:
    """The shard's node read, sent (None: not sent; the shard goes through ``save``)."""
    try:
        return nodes.client.get_async(nodes.paths.checkpoint(cp.stream_name, cp.shard_id))
    except KazooException:  # a closed client: save() says so properly
        return None


def _send_write(
    nodes: ZkNodes,
    fence: LeaseFence,
    resets: ResetFence,
    now: Callable[[], datetime],
    cp: Checkpoint,
    read: Any,
) -> tuple[Any, Checkpoint] | None:
    """The shard's compare-and-set transaction, sent, and what it writes; None when the
    store refuses the shard or has nothing to write (it goes through ``save``, which
    says why). Raises what stops the round: the connection, a corrupt node, closing."""
    stream, shard = cp.stream_name, cp.shard_id
    path = nodes.paths.checkpoint(stream, shard)
    try:
        data, stat = nodes.wait(read, f"read {path}", (NoNodeError,))
        stored, version = nodes.decode(data, path, stream, shard), int(stat.version)
    except NoNodeError:
        stored, version = None, None
    try:
        epoch = fence.for_write(stream, shard)
        new = resets.carry(stored, replace(cp, updated_at=now()))
        if not check_forward(stored, new):
            return None  # equal: save() still checks the lease of a fenced shard
    except StaleCheckpointError:
        return None
    tx = nodes.checkpoint_tx(new, version, epoch)
    nodes.check_usable(f"checkpoint {stream}/{shard}")  # never queued while disconnected
    return tx.commit_async(), new


def _written(nodes: ZkNodes, commit: Any, new: Checkpoint) -> Checkpoint | None:
    """``new`` if its transaction wrote it, else None (a lost race or a lease taken
    over: the shard goes through ``save``); the wait's own failure is raised."""
    path = nodes.paths.checkpoint(new.stream_name, new.shard_id)
    results = nodes.wait(commit, f"write {path}")
    if any(isinstance(r, Exception) for r in results):
        return None
    nodes.log_written(new)
    return new
