"""The PySpark job: spout micro-batches processed on Spark executors (the ``spark`` extra).

The micro-batch loop (:mod:`~kinesis_spout.spark.loop`) plans each micro-batch
(:mod:`~kinesis_spout.spark.plan`), runs its read tasks as one Spark job
(:mod:`~kinesis_spout.spark.task`) and applies what they return. The user's styles are
in :mod:`~kinesis_spout.spark.process.styles`; ``kinesis-spout run`` is
:mod:`~kinesis_spout.spark.submit`, which starts :mod:`~kinesis_spout.spark.job`.
Importing this package loads nothing heavy: the names below load on first use (the CLI
imports the launcher without pyarrow). See ``docs/spark-job.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinesis_spout.spark.launch.build import build_driver, run_job
    from kinesis_spout.spark.process.styles import (
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
    "FanOutProcessor": "process.styles",
    "InputRecord": "process.styles",
    "Processor": "process.styles",
    "RecordProcessor": "process.styles",
    "TransformProcessor": "process.styles",
    "dataframe_transform": "process.styles",
    "fan_out": "process.styles",
    "input_record": "process.styles",
    "load_processor": "process.styles",
    "per_record": "process.styles",
    "processor_factory": "process.styles",
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
