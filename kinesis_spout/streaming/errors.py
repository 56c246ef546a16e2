"""Errors of the Structured Streaming source (all :class:`KinesisSpoutError`)."""

from __future__ import annotations

from kinesis_spout.errors import KinesisSpoutError


class OffsetError(KinesisSpoutError):
    """A streaming offset cannot be parsed, or belongs to another stream.

    Offsets come from Spark's checkpoint location; a bad one is never
    silently replaced by the initial position (that would replay or skip data).
    """


class DataLossError(KinesisSpoutError):
    """Records a batch planned to read are gone (retention expired, stream
    deleted and re-created), so a replay cannot be the same batch.

    Raised only with ``failOnDataLoss=true`` (the default); otherwise logged.
    """


class MissingDependencyError(KinesisSpoutError):
    """PySpark, pyarrow or pandas is missing or too old for the source."""
