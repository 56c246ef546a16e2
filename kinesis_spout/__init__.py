"""kinesis-spout: read Amazon Kinesis shards with Storm-grade reliability.

Every record is tracked until it is acknowledged; failing records are retried
a bounded number of times and then dead-lettered; the highest sequence number
below which everything is done is checkpointed per shard.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kinesis_spout.config import InitialPosition, SpoutConfig
from kinesis_spout.config.load import load_config
from kinesis_spout.errors import ConfigError, KinesisSpoutError
from kinesis_spout.records import Checkpoint, Record, ShardInfo
from kinesis_spout.stopping import StopSignals

if TYPE_CHECKING:
    from kinesis_spout.spout import KinesisSpout, open_reader

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The spout pulls in boto3; load it on first use only.
    if name in ("KinesisSpout", "open_reader"):
        from kinesis_spout import spout

        return getattr(spout, name)
    raise AttributeError(f"module 'kinesis_spout' has no attribute {name!r}")


__all__ = [
    "Checkpoint",
    "ConfigError",
    "InitialPosition",
    "KinesisSpout",
    "KinesisSpoutError",
    "Record",
    "ShardInfo",
    "SpoutConfig",
    "StopSignals",
    "load_config",
    "open_reader",
    "__version__",
]
