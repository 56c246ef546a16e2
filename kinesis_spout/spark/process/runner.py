"""Running the DataFrame styles of a micro-batch on Spark: one status per record out.

This is the Spark boundary (pyspark's types are loose, hence ``Any``):

* transform: the user's DataFrame, reduced to ``_row``, ``ok``, ``error``
  (:meth:`SparkRunner.run_frame`);
* fan-out: ``emit`` ran in the read task; each sink
  (:mod:`~kinesis_spout.spark.process.fanout_sinks`) runs on the derived rows and the
  trees are settled where they are (:meth:`SparkRunner.run_emitted`), or from what the
  read tasks reported when every sink wrote everything.

Nothing here acks or fails: the driver applies the :class:`BatchOutcome`
only if the whole job ran, so a Spark failure leaves no half state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kinesis_spout.spark.arrowframes import arrow_schema, ddl_struct
from kinesis_spout.spark.process.arrow import (
    ROOT,
    ROW,
    STATUS_DDL,
    Statuses,
    statuses_from_arrow,
)
from kinesis_spout.spark.process.contract import ProcessingContractError, ok_and_error
from kinesis_spout.spark.process.exprs import Exprs
from kinesis_spout.spark.process.fanout import ID, SINK_VALS, derived_frame, stage_schema
from kinesis_spout.spark.process.fanout_sinks import anchored_sinks, sink_frame
from kinesis_spout.spark.process.settle import partials_frame, settle
from kinesis_spout.spark.process.sinks import ok_rows_writer
from kinesis_spout.spark.process.styles import FanOutProcessor, Processor, TransformProcessor

log = logging.getLogger(__name__)

INTERNAL_COLUMNS = (ROW, ROOT, "status", "error")
CACHE_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"


def uncompressed_caches(spark: Any) -> None:
    """Turn off the compression of Spark's in-memory cache, unless the session sets it.

    A micro-batch persists what it read (and a fan-out what ``emit`` made) for one or
    two reads of it, then drops it; choosing each cached column's compression gathers
    statistics on every value as it is cached (see docs/figures.md). An explicit
    setting, ``true`` too, is left as it is; the session keeps the setting after the
    job."""
    if spark.conf.get(CACHE_COMPRESSED, None) is None:
        spark.conf.set(CACHE_COMPRESSED, "false")
        log.debug("%s = false: micro-batch caches are read once or twice", CACHE_COMPRESSED)


@dataclass(slots=True)
class BatchOutcome:
    """What the rows ``statuses.start..stop-1`` of a micro-batch came back with."""

    statuses: Statuses
    """Per-record result (fan-out: of the whole tree)."""


Collect = Callable[[Any], tuple[pa.Table, int, int]]
"""Brings a statuses DataFrame to the driver: its Arrow table and the rows
``start, stop`` it numbers."""
Reported = Callable[[], tuple[pa.Table, int, int] | None]
"""A fan-out's emit rows' partials as its read tasks reported them, and the rows
``start, stop`` they number; None when the reports are not whole."""


class SparkRunner:
    """Runs a transform or a fan-out's sinks on a SparkSession."""

    def __init__(self, spark: Any, processor: Processor, sink_target: str = "none") -> None:
        self.spark = spark
        self.sink_target = sink_target
        """The ``sink`` the executors write the ok rows to."""
        self.processor = processor
        self._derived_arrow: pa.Schema | None = None
        self._stage_struct: Any = None
        self.exprs = Exprs()
        """Column expressions reused by every micro-batch (see :mod:`.exprs`)."""

    @property
    def n_sinks(self) -> int:
        """Anchored sinks of a fan-out tree (the row sink counts as one)."""
        if not isinstance(self.processor, FanOutProcessor):
            return 0
        return len(self.processor.sinks) + (1 if self.sink_target != "none" else 0)

    def run_frame(self, batch_id: int, df: Any, collect: Collect) -> BatchOutcome:
        """The transform of ``df`` (its ``_row`` column numbers the micro-batch's rows);
        ``collect`` brings its statuses' DataFrame to the driver."""
        p = self.processor
        if not isinstance(p, TransformProcessor):
            raise TypeError(f"run_frame runs transforms, not {type(p).__name__}")
        out = p.transform(df)
        if out is None or not hasattr(out, "columns"):
            raise ProcessingContractError(
                f"transform {p.name} returned {type(out).__name__}, not a DataFrame"
            )
        ok, error = ok_and_error(out, f"transform {p.name}", ROW, self.exprs)
        if self.sink_target == "none":
            return BatchOutcome(statuses_from_arrow(*collect(out.select(ROW, ok, error))))
        extra = [c for c in out.columns if c not in INTERNAL_COLUMNS]
        back = out.select(ROW, ok, error, *extra)
        writer = ok_rows_writer(self.sink_target, batch_id, extra)  # written on the executors
        return BatchOutcome(statuses_from_arrow(*collect(back.mapInArrow(writer, STATUS_DDL))))

    def run_emitted(
        self, batch_id: int, stage: Any, collect: Collect, reported: Reported | None = None
    ) -> BatchOutcome:
        """A fan-out whose ``emit`` already ran where its records were read: ``stage`` has
        the rows of :func:`~kinesis_spout.spark.process.fanout.stage_schema` (columns by
        name, others may be there too), made with :attr:`n_sinks` sinks. Its sinks run,
        and its trees are settled in the statuses' Spark job
        (:mod:`~kinesis_spout.spark.process.settle`): ``collect`` brings their statuses
        back. When every sink wrote everything, ``reported`` may give the emit rows'
        partials the read tasks reported instead, and then no statuses' job runs."""
        p = self.processor
        if not isinstance(p, FanOutProcessor):
            raise TypeError(f"run_emitted runs fan-outs, not {type(p).__name__}")
        derived_schema, _ = self._fan_out_schemas(p)
        target = self.sink_target if self.sink_target != "none" else None
        sinks = anchored_sinks(p, batch_id, target)
        derived = derived_frame(stage, derived_schema.names, self.exprs)
        x = self.exprs
        frames = [(name, sink_frame(name, sink, derived, x)) for name, sink in sinks]
        if reported is not None and all(f is None for _, f in frames):
            partials = reported()
            if partials is not None:
                return BatchOutcome(settle(*partials))
            log.debug("the read tasks' reports are not whole: the statuses' job settles")
        return BatchOutcome(settle(*collect(partials_frame(stage, frames, x))))

    def fan_out_schema(self) -> pa.Schema:
        """The fan-out's derived records' schema, as Arrow (checked the first time)."""
        p = self.processor
        if not isinstance(p, FanOutProcessor):
            raise TypeError(f"{type(p).__name__} is not a fan-out")
        return self._fan_out_schemas(p)[0]

    def _fan_out_schemas(self, p: FanOutProcessor) -> tuple[pa.Schema, Any]:
        if self._derived_arrow is None:
            from pyspark.sql.pandas.types import from_arrow_schema
            from pyspark.sql.types import StructType

            schema = p.schema
            if isinstance(schema, str):
                schema = ddl_struct(schema)
            if isinstance(schema, StructType):
                schema = arrow_schema(schema)
            if not isinstance(schema, pa.Schema):
                raise ProcessingContractError(
                    f"fan-out schema {p.schema!r}: expected a DDL string, StructType or "
                    "pyarrow.Schema"
                )
            clash = {ROW, ROOT, ID, "_ok", "_error", "_ack_val", SINK_VALS} & set(schema.names)
            if clash:
                raise ProcessingContractError(f"fan-out schema uses reserved names {sorted(clash)}")
            self._derived_arrow = schema
            self._stage_struct = from_arrow_schema(stage_schema(schema))
        return self._derived_arrow, self._stage_struct
