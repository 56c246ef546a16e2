"""The PySpark job: spout micro-batches processed on Spark executors.

Needs the ``spark`` extra (PySpark 3.5 or 4.x, pyarrow, pandas). The pieces:

* :mod:`~kinesis_spout.spark.job`: the ``spark-submit`` entry point;
* :mod:`~kinesis_spout.spark.processing`: the user's processing styles
  (:func:`per_record`, :func:`dataframe_transform`, :func:`fan_out`);
* the micro-batch loop (:mod:`~kinesis_spout.spark.loop`), its plans
  (:mod:`~kinesis_spout.spark.plan`), its read tasks (:mod:`~kinesis_spout.spark.task`),
  its quarantine (:mod:`~kinesis_spout.spark.quarantine`);
* :mod:`kinesis_spout.spark.launch`: the job's launch (``kinesis-spout run``, the
  session, building the driver: :func:`run_job`);
* :mod:`kinesis_spout.spark.read`: the read path (plans, read tasks, recorded ranges);
* :mod:`kinesis_spout.spark.process`: processing a micro-batch (Arrow, fan-out and
  Storm's acker, fast retries, sinks).

Importing this package loads nothing heavy (the CLI imports
:mod:`~kinesis_spout.spark.launch.submit` without pyarrow installed); the names
below are loaded on first use. See ``docs/spark-job.md``.
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
