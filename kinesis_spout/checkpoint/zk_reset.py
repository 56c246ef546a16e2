"""The ZooKeeper store's reset: the operator's override of one checkpoint node."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from kazoo.exceptions import BadVersionError, NodeExistsError

from kinesis_spout.checkpoint.codec import encode_checkpoint
from kinesis_spout.checkpoint.resets import reset_value
from kinesis_spout.checkpoint.zk_layout import check_component
from kinesis_spout.checkpoint.zk_nodes import ZkNodes
from kinesis_spout.errors import CheckpointStoreUnavailableError
from kinesis_spout.records import Checkpoint

log = logging.getLogger(__name__)
_ATTEMPTS = 20


def reset_node(
    nodes: ZkNodes,
    owner: str,
    now: Callable[[], datetime],
    stream: str,
    shard: str,
    checkpoint: Checkpoint,
) -> Checkpoint:
    """Write ``checkpoint`` over whatever is stored (compare-and-set on the node version,
    so a concurrent write is read again, not lost), one more reset; no lease fence: the
    operator's command holds the job lease instead."""
    check_component("stream_name", stream)
    check_component("shard_id", shard)
    what = f"reset {stream}/{shard}"
    path = nodes.paths.checkpoint(stream, shard)
    nodes.check_usable(what)
    nodes.ensure_path(nodes.paths.stream(stream))
    client = nodes.client
    for _ in range(_ATTEMPTS):
        stored, version = nodes.read_checkpoint(stream, shard)
        new = reset_value(stored, checkpoint, nodes.paths.job, owner, now())
        data = encode_checkpoint(new)
        try:
            if version is None:
                nodes.wait(client.create_async(path, data, acl=nodes.acl), what, (NodeExistsError,))
            else:
                nodes.wait(client.set_async(path, data, version), what, (BadVersionError,))
        except (NodeExistsError, BadVersionError):
            continue  # a writer got there first: read again
        log.info("checkpoint %s reset (reset %d)", path, new.resets)
        return new
    raise CheckpointStoreUnavailableError(f"{what}: lost to concurrent writers")
