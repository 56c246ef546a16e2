"""One exception hierarchy for the whole project.

Every error the library raises derives from :class:`KinesisSpoutError`. Each
carries a ``retriable`` flag: ``True`` means the same call may succeed later
(throttling, a server restarting), ``False`` means something must be changed
first (a bad config value, an unknown stream, a corrupt checkpoint).

botocore and kazoo errors are translated into these types at the adapter
boundary only; callers never need to catch a third-party exception.
"""

from __future__ import annotations

from typing import Any


class KinesisSpoutError(Exception):
    """Root of every error raised by kinesis-spout."""

    retriable: bool = False


class ConfigError(KinesisSpoutError, ValueError):
    """A configuration value is missing, malformed or out of range.

    The message names the field, the offending value and what is allowed.
    """

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"invalid config {field}={value!r}: {allowed}")


# --- Kinesis ---------------------------------------------------------------


class KinesisError(KinesisSpoutError):
    """A Kinesis call failed."""


class StreamNotFoundError(KinesisError):
    """The stream does not exist (or is not visible with these credentials)."""


class StreamRecreatedError(StreamNotFoundError):
    """The stream read was deleted and another created under its name (its creation time
    changed): the reader stops reading it; a new reader starts it fresh."""


class EndpointUnreachableError(KinesisError):
    """The Kinesis endpoint could not be reached at all."""

    retriable = True


class ThrottledError(KinesisError):
    """Kinesis asked us to slow down (throughput or API limits)."""

    retriable = True


class TransientKinesisError(KinesisError):
    """A 5xx answer or a dropped connection: try again after a backoff."""

    retriable = True


class ExpiredIteratorError(KinesisError):
    """A shard iterator expired; the getter re-opens after its last read."""

    retriable = True


class ResourceInUseError(KinesisError):
    """The resource is busy: another subscription to the shard is active, or the
    consumer or stream is being created, updated or deleted. Retried after a backoff."""

    retriable = True


class InvalidPositionError(KinesisError):
    """Kinesis refused to open a shard at a stored position (never skipped silently)."""


class CredentialsError(KinesisError):
    """The credentials were rejected or are missing."""


# --- checkpoints -------------------------------------------------------------


class CheckpointError(KinesisSpoutError):
    """Base of checkpoint store errors."""


class CheckpointStoreUnavailableError(CheckpointError):
    """The store cannot be reached right now (ZooKeeper down, disk gone)."""

    retriable = True


class StaleCheckpointError(CheckpointError):
    """A write was refused: it would move a checkpoint backwards, or the
    writer no longer owns the shard (a stale owner / zombie)."""


class CorruptCheckpointError(CheckpointError):
    """A stored checkpoint cannot be parsed, or belongs to another stream or
    job. Never silently treated as "no checkpoint"."""


class LeaseLostError(KinesisSpoutError):
    """This worker lost ownership of a shard (session expired, rebalance)."""

    retriable = True


# --- streaming offsets and batch ends --------------------------------------------


class OffsetError(KinesisSpoutError):
    """A streaming offset cannot be parsed, or belongs to another stream.

    Offsets come from Spark's checkpoint location; a bad one is never
    silently replaced by the initial position (that would replay or skip data).
    The positions in them (:class:`~kinesis_spout.records.ShardPosition`) are also
    in the batch-end records of the checkpoint store, so a bad one there is one too.
    """


class DataLossError(KinesisSpoutError):
    """Records a read planned or recorded are gone (retention expired, stream deleted
    and re-created), so a replay cannot return the same records. The streaming source
    raises it only with ``failOnDataLoss=true`` (the default); otherwise it logs."""
