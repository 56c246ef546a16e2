"""Checkpoint stores: "everything up to here is done", per shard.

One small protocol (:class:`CheckpointStore`), one contract test suite
(``tests/integration/checkpoint/test_checkpoint_contract.py``) and four stores:
``memory://``, ``file://DIR`` (the embedded default), ``zk://host:port/root`` and
``dynamodb://TABLE``. Every store keeps the same rules: a checkpoint never moves
backwards, an ended shard stays ended, a stored value that cannot be parsed or names
another stream or job is an error (docs/checkpoints.md). The ``file://``, ``zk://`` and
``dynamodb://`` stores also hold the Spark reads' batch ends
(:mod:`~kinesis_spout.checkpoint.batch_ends`).
"""

from __future__ import annotations

from kinesis_spout.checkpoint.base import CheckpointStore, MemoryCheckpointStore, check_forward
from kinesis_spout.checkpoint.factory import open_store
from kinesis_spout.checkpoint.file import FileCheckpointStore

# ZooKeeperCheckpointStore lives in kinesis_spout.checkpoint.zookeeper (needs kazoo,
# the "zookeeper" extra), imported only when a zk:// URL is opened; DynamoDbCheckpointStore
# in kinesis_spout.checkpoint.dynamodb, when a dynamodb:// URL is.
__all__ = [
    "CheckpointStore",
    "FileCheckpointStore",
    "MemoryCheckpointStore",
    "check_forward",
    "open_store",
]
