"""The Structured Streaming source: ``spark.readStream.format("kinesis")``.

::

    from kinesis_spout.streaming import register

    register(spark)
    df = (spark.readStream.format("kinesis")
          .option("streamName", "orders")
          .option("checkpointStore", "zk://zk1:2181/kinesis-spout")
          .load())

The offset logic (:mod:`~kinesis_spout.streaming.batch_offset`) and the option
parsing (:mod:`~kinesis_spout.streaming.options`) import no PySpark; the
source itself (:mod:`~kinesis_spout.streaming.source`) needs PySpark 4.0+,
pyarrow and pandas, and is imported on first use of the names below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinesis_spout.streaming.source import SCHEMA, KinesisDataSource, register

__all__ = ["SCHEMA", "KinesisDataSource", "register"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kinesis_spout.streaming import source

        return getattr(source, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
