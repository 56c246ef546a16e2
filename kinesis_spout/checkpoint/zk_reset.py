"""The ZooKeeper store's reset: the operator's override of one checkpoint node."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kazoo.exceptions import BadVersionError, NodeExistsError

from kinesis_spout.checkpoint.codec import encode_checkpoint
from kinesis_spout.checkpoint.resets import reset_value
from kinesis_spout.checkpoint.zk_layout import check_component
from kinesis_spout.errors import CheckpointStoreUnavailableError
from kinesis_spout.records import Checkpoint

if TYPE_CHECKING:
    from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore

log = logging.getLogger(__name__)
_ATTEMPTS = 20


def reset_node(
    store: ZooKeeperCheckpointStore, stream: str, shard: str, checkpoint: Checkpoint
) -> Checkpoint:
    """Write ``checkpoint`` over whatever is stored (compare-and-set on the node version,
    so a concurrent write is read again, not lost), one more reset; no lease fence: the
    operator's command holds the job lease instead."""
    check_component("stream_name", stream)
    check_component("shard_id", shard)
    what = f"reset {stream}/{shard}"
    path = store.paths.checkpoint(stream, shard)
    store._check_usable(what)
    store.ensure_path(store.paths.stream(stream))
    client = store.client
    for _ in range(_ATTEMPTS):
        stored, version = store._read(stream, shard)
        new = reset_value(stored, checkpoint, store.job_name, store.owner, store._now())
        data = encode_checkpoint(new)
        try:
            if version is None:
                store.wait(client.create_async(path, data, acl=store.acl), what, (NodeExistsError,))
            else:
                store.wait(client.set_async(path, data, version), what, (BadVersionError,))
        except (NodeExistsError, BadVersionError):
            continue  # a writer got there first: read again
        log.info("checkpoint %s reset (reset %d)", path, new.resets)
        return new
    raise CheckpointStoreUnavailableError(f"{what}: lost to concurrent writers")
