"""The PySpark job: spout micro-batches processed on Spark executors (the ``spark`` extra).

The micro-batch loop (:mod:`~kinesis_spout.spark.loop`) plans each micro-batch
(:mod:`~kinesis_spout.spark.plan`), runs its read tasks as one Spark job
(:mod:`~kinesis_spout.spark.task`) and applies what they return; the user's styles are
in :mod:`~kinesis_spout.spark.processing`, the launch in :mod:`kinesis_spout.spark.launch`.
Importing this package loads nothing heavy: the names below load on first use (the CLI
imports the launcher without pyarrow). See ``docs/spark-job.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinesis_spout.spark.launch.build import build_driver, run_job
    from kinesis_spout.spark.processing import (
        FanOutProcessor,
        InputRecord,
        Processor,
        RecordProcessor,
        TransformProcessor,
        dataframe_transform,
        fan_out,
        input_record,
        load_processor,
        per_record,
        processor_factory,
    )

_EXPORTS = {
    "build_driver": "launch.build",
    "run_job": "launch.build",
    "FanOutProcessor": "processing",
    "InputRecord": "processing",
    "Processor": "processing",
    "RecordProcessor": "processing",
    "TransformProcessor": "processing",
    "dataframe_transform": "processing",
    "fan_out": "processing",
    "input_record": "processing",
    "load_processor": "processing",
    "per_record": "processing",
    "processor_factory": "processing",
}

__all__ = [
    "FanOutProcessor",
    "InputRecord",
    "Processor",
    "RecordProcessor",
    "TransformProcessor",
    "build_driver",
    "dataframe_transform",
    "fan_out",
    "input_record",
    "load_processor",
    "per_record",
    "processor_factory",
    "run_job",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
