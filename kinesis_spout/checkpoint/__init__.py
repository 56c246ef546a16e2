"""Checkpoint stores: "everything up to here is done", per shard.

One small protocol (:class:`CheckpointStore`), several implementations, one
contract test suite (``tests/integration/checkpoint/test_checkpoint_contract.py``):

* ``memory://`` — :class:`MemoryCheckpointStore`, for tests and embedding;
* ``file://DIR`` — the local-file store, the embedded default (one worker);
* ``zk://host:port[,host:port]/root`` — the ZooKeeper store (kazoo);
* ``dynamodb://TABLE`` — the DynamoDB store (boto3), for jobs on AWS.

Rules every store keeps:

* a checkpoint never moves backwards: a save that is not after the stored
  one is a no-op when equal and :class:`StaleCheckpointError` when behind;
* a shard marked ended stays ended;
* a stored value that cannot be parsed, or that names another stream or job,
  raises :class:`CorruptCheckpointError` instead of being ignored.

Beside the checkpoints, a ``file://``, ``zk://`` or ``dynamodb://`` store holds the
batch-end records of the Spark reads (:mod:`~kinesis_spout.checkpoint.batch_ends`),
opened by the same URL (:func:`~kinesis_spout.checkpoint.factory.open_batch_ends`).
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
