"""Errors of the Structured Streaming source (all :class:`KinesisSpoutError`)."""

from __future__ import annotations

import logging

from kinesis_spout.errors import DataLossError, KinesisSpoutError, OffsetError

__all__ = ["DataLossError", "MissingDependencyError", "OffsetError", "data_loss", "spark_too_old"]
"""``OffsetError`` and ``DataLossError`` are those of :mod:`kinesis_spout.errors` (the
batch-end records and the recorded reads raise them too), named here as well for the
source's users."""


def data_loss(message: str, fail: bool) -> None:
    """Records the source planned to read are gone (``message`` says which): raise
    :class:`DataLossError` with ``fail`` (``failOnDataLoss``), else log it and go on."""
    if fail:
        raise DataLossError(message + "; set failOnDataLoss=false to go on without them")
    logging.getLogger(__name__).warning("%s (failOnDataLoss=false: going on)", message)


class MissingDependencyError(KinesisSpoutError):
    """PySpark, pyarrow or pandas is missing or too old for the source."""


def spark_too_old(version: str) -> MissingDependencyError:
    """The one-line error of the source on a PySpark before 4.0 (no Python Data Source API)."""
    return MissingDependencyError(
        f"the kinesis streaming source needs Spark 4.0 or newer (its Python Data Source API), "
        f"this is PySpark {version}: run it on Spark 4, or run the Spark job "
        "(kinesis-spout run), which runs on Spark 3.5 as well"
    )
