"""kinesis-spout: read Amazon Kinesis shards with Storm-grade reliability.

Every record is tracked until it is acknowledged; failing records are retried
a bounded number of times and then dead-lettered; the highest sequence number
below which everything is done is checkpointed per shard.
"""

from __future__ import annotations

from kinesis_spout.config import InitialPosition, SpoutConfig, load_config
from kinesis_spout.errors import ConfigError, KinesisSpoutError
from kinesis_spout.records import Checkpoint, Record, ShardInfo

__version__ = "0.1.0"

__all__ = [
    "Checkpoint",
    "ConfigError",
    "InitialPosition",
    "KinesisSpoutError",
    "Record",
    "ShardInfo",
    "SpoutConfig",
    "load_config",
    "__version__",
]
