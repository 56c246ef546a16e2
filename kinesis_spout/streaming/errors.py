"""Errors of the Structured Streaming source (all :class:`KinesisSpoutError`)."""

from __future__ import annotations

from kinesis_spout.errors import KinesisSpoutError, OffsetError

__all__ = ["DataLossError", "MissingDependencyError", "OffsetError"]
"""``OffsetError`` is :class:`kinesis_spout.errors.OffsetError` (the batch-end records of
the checkpoint store raise it too), named here as well for the source's users."""


class DataLossError(KinesisSpoutError):
    """Records a batch planned to read are gone (retention expired, stream
    deleted and re-created), so a replay cannot be the same batch.

    Raised only with ``failOnDataLoss=true`` (the default); otherwise logged.
    """


class MissingDependencyError(KinesisSpoutError):
    """PySpark, pyarrow or pandas is missing or too old for the source."""
