"""Running one micro-batch on Spark: Arrow table in, one status per record out.

This is the Spark boundary (pyspark's types are loose, hence ``Any``). Each
style is one ``createDataFrame`` of the Arrow table, the user's processing,
and ``toArrow()`` of a small status table (``collect()`` is about 2x slower):

* per-record: ``mapInArrow`` of the function, statuses straight back;
* transform: the user's DataFrame, reduced to ``_row``, ``ok``, ``error``;
* fan-out: ``mapInArrow`` of ``emit`` (persisted, so each sink reads it
  without re-running ``emit``; executor reads run ``emit`` in the read task and
  start from its rows, :meth:`SparkRunner.run_emitted`), the emit statuses back,
  then each sink (:mod:`~kinesis_spout.spark.process.fanout_sinks`)
  on the derived rows and its per-derived-record statuses back.

Nothing here acks or fails: the driver applies the :class:`BatchOutcome`
only if the whole (sub-)batch ran, so a Spark failure leaves no half state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from kinesis_spout.spark.arrowframes import arrow_schema, ddl_struct, from_arrow, to_arrow
from kinesis_spout.spark.process.arrow import (
    RECORD_STATUS_DDL,
    ROOT,
    ROW,
    STATUS_DDL,
    Statuses,
    statuses_from_arrow,
)
from kinesis_spout.spark.process.contract import ProcessingContractError, ok_and_error
from kinesis_spout.spark.process.exprs import Exprs
from kinesis_spout.spark.process.fanout import (
    ID,
    SINK_VALS,
    IntArray,
    derived_frame,
    emit_mapper,
    stage_schema,
)
from kinesis_spout.spark.process.fanout_sinks import anchored_sinks, sink_frame, sink_statuses
from kinesis_spout.spark.process.fastretry import FastRetry
from kinesis_spout.spark.process.ledger import SinkStatuses
from kinesis_spout.spark.process.settle import partials_frame, settle
from kinesis_spout.spark.process.sinks import NullSink, RowSink, ok_rows_writer
from kinesis_spout.spark.processing import (
    FanOutProcessor,
    FanOutSink,
    Processor,
    RecordProcessor,
    TransformProcessor,
    record_function_mapper,
)

log = logging.getLogger(__name__)

INTERNAL_COLUMNS = (ROW, ROOT, "status", "error")
#: Most bytes of records per Spark task when a local Arrow table becomes a DataFrame
#: (Spark warns about tasks over 1000 KiB).
TASK_BYTES = 512 * 1024
_ARROW_MAX_RECORDS = 10_000  # Spark's default spark.sql.execution.arrow.maxRecordsPerBatch
CACHE_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"


def uncompressed_caches(spark: Any) -> None:
    """Turn off the compression of Spark's in-memory cache, unless the session sets it.

    A micro-batch persists what it read (and a fan-out what ``emit`` made) for one or
    two reads of it, then drops it. Choosing each cached column's compression gathers
    statistics on every value as it is cached: in a profile of the word count, the
    largest share of the executors' JVM time. Without it the JVM spent 18 µs less CPU
    per record on the word count and 14 µs on a transform (medians, docs/spark-job.md).
    An explicit setting, ``true`` too, is left as it is; the session keeps the setting
    after the job."""
    if spark.conf.get(CACHE_COMPRESSED, None) is None:
        spark.conf.set(CACHE_COMPRESSED, "false")
        log.debug("%s = false: micro-batch caches are read once or twice", CACHE_COMPRESSED)


@dataclass(slots=True)
class BatchOutcome:
    """What rows ``statuses.start..stop-1`` of a micro-batch came back with."""

    statuses: Statuses
    """Per-record result (fan-out: of the emit stage)."""
    processed: pa.Table | None = None
    """Rows for the row sink (per-record and transform styles), ok rows only."""
    ack_vals: IntArray | None = None
    """Fan-out: the executor's ack-val per row (index = row - start)."""
    sinks: list[SinkStatuses] = field(default_factory=list)
    """Fan-out: each sink's statuses of the derived records."""


Collect = Callable[[Any], tuple[pa.Table, int, int]]
"""Brings a statuses DataFrame to the driver: its Arrow table and the rows
``start, stop`` it numbers (see :meth:`SparkRunner.run_frame`)."""
Reported = Callable[[], tuple[pa.Table, int, int] | None]
"""A fan-out's emit rows' partials as its read tasks reported them, and the rows
``start, stop`` they number; None when the reports are not whole."""


class _Rows:
    """The plain :data:`Collect`: ``toArrow``, rows known beforehand."""

    def __init__(self, start: int, stop: int) -> None:
        self.start = start
        self.stop = stop

    def __call__(self, frame: Any) -> tuple[pa.Table, int, int]:
        return to_arrow(frame), self.start, self.stop


class BatchRunner(Protocol):
    """Runs the processing of a range of rows of a micro-batch's Arrow table."""

    @property
    def needs_roots(self) -> bool:
        """True for fan-out: the table must carry ``_root`` ids."""
        ...

    def run(self, batch_id: int, table: pa.Table, start: int, stop: int) -> BatchOutcome: ...


class SparkRunner:
    """Runs a :data:`Processor` on a SparkSession."""

    def __init__(
        self,
        spark: Any,
        processor: Processor,
        row_sink: RowSink | None = None,
        fast: FastRetry | None = None,
        sink_target: str | None = None,
    ) -> None:
        self.spark = spark
        self.sink_target = sink_target
        """Executor reads: the ``sink`` the executors write the ok rows to (the rows
        never reach the driver; ``row_sink`` is then unused)."""
        self.processor = processor
        self.fast = fast
        """Fast retries of the per-record style (None: none)."""
        self.row_sink: RowSink = row_sink or NullSink()
        self._derived_arrow: pa.Schema | None = None
        self._stage_struct: Any = None
        self._arrow_batch = 0  # the maxRecordsPerBatch last set (0: not yet)
        self.exprs = Exprs()
        """Column expressions reused by every micro-batch (see :mod:`.exprs`)."""

    @property
    def needs_roots(self) -> bool:
        return isinstance(self.processor, FanOutProcessor)

    @property
    def n_sinks(self) -> int:
        """Anchored sinks of a fan-out tree (the row sink counts as one)."""
        if not isinstance(self.processor, FanOutProcessor):
            return 0
        return len(self.processor.sinks) + (1 if self._has_row_sink else 0)

    @property
    def _has_row_sink(self) -> bool:
        if self.sink_target is not None:
            return self.sink_target != "none"
        return not isinstance(self.row_sink, NullSink)

    def run(self, batch_id: int, table: pa.Table, start: int, stop: int) -> BatchOutcome:
        part = table.slice(start, stop - start)
        p = self.processor
        if isinstance(p, RecordProcessor):
            return self._run_records(batch_id, p, part, start, stop)
        return self.run_frame(batch_id, self._to_dataframe(part), start, stop)

    def run_frame(
        self, batch_id: int, df: Any, start: int, stop: int, collect: Collect | None = None
    ) -> BatchOutcome:
        """The transform or fan-out of ``df``, the rows ``start..stop-1`` of a micro-batch
        (its ``_row`` column numbers them; fan-out: with ``_root``).

        ``collect`` brings a transform's statuses' DataFrame to the driver (default:
        ``toArrow``, the rows ``start..stop-1``); executor reads pass one that collects
        the read ends in the same Spark job and numbers the rows once it knows them
        (their fan-outs run through :meth:`run_emitted`)."""
        p = self.processor
        if isinstance(p, TransformProcessor):
            return self._run_transform(batch_id, p, df, collect or _Rows(start, stop))
        if isinstance(p, FanOutProcessor):
            if collect is not None:
                raise TypeError("a fan-out read on the executors runs through run_emitted")
            return self._run_fan_out(batch_id, p, df, start, stop)
        raise TypeError(f"run_frame runs transforms and fan-outs, not {type(p).__name__}")

    def _to_dataframe(self, part: pa.Table) -> Any:
        """``createDataFrame`` of ``part``, in partitions of about :data:`TASK_BYTES`.

        PySpark ships a local Arrow table inside its tasks (at most
        ``defaultParallelism`` of them), and Spark warns about every task over
        1000 KiB ("a task of very large size"): a 10,000-record micro-batch of
        200-byte records made two 1.3 MB tasks on ``local[2]``. A larger table is
        made of slices of about ``TASK_BYTES``, one Arrow batch and one
        partition each, put together with ``union``.
        """
        rows = part.num_rows
        fit = TASK_BYTES * max(1, rows) // max(1, part.nbytes)
        per_slice = max(1, min(_ARROW_MAX_RECORDS, fit))
        if per_slice != self._arrow_batch:
            self.spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(per_slice))
            self._arrow_batch = per_slice
        if rows <= per_slice:
            return from_arrow(self.spark, part)
        slices = range(0, rows, per_slice)
        frames = [from_arrow(self.spark, part.slice(at, per_slice)) for at in slices]
        df = frames[0]
        for other in frames[1:]:
            df = df.union(other)
        return df

    # --- styles ------------------------------------------------------------------

    def _run_records(
        self, batch_id: int, p: RecordProcessor, part: pa.Table, start: int, stop: int
    ) -> BatchOutcome:
        df = self._to_dataframe(part)
        back = df.mapInArrow(record_function_mapper(p.fn, self.fast), RECORD_STATUS_DDL)
        back = to_arrow(back)
        statuses = statuses_from_arrow(back, start, stop)
        processed = None
        if not isinstance(self.row_sink, NullSink):
            processed = part.filter(pa.array(statuses.ok)).drop_columns([ROW])
        return BatchOutcome(statuses, processed)

    def _run_transform(
        self, batch_id: int, p: TransformProcessor, df: Any, collect: Collect
    ) -> BatchOutcome:
        out = p.transform(df)
        if out is None or not hasattr(out, "columns"):
            raise ProcessingContractError(
                f"transform {p.name} returned {type(out).__name__}, not a DataFrame"
            )
        ok, error = ok_and_error(out, f"transform {p.name}", ROW, self.exprs)
        want_rows = self._has_row_sink
        extra = [c for c in out.columns if c not in INTERNAL_COLUMNS] if want_rows else []
        back = out.select(ROW, ok, error, *extra)
        if want_rows and self.sink_target is not None:  # written on the executors
            writer = ok_rows_writer(self.sink_target, batch_id, extra)
            return BatchOutcome(statuses_from_arrow(*collect(back.mapInArrow(writer, STATUS_DDL))))
        table, start, stop = collect(back)
        statuses = statuses_from_arrow(table, start, stop)
        processed = None
        if want_rows:
            processed = table.filter(table.column("ok")).select(extra)
        return BatchOutcome(statuses, processed)

    def _run_fan_out(
        self, batch_id: int, p: FanOutProcessor, df: Any, start: int, stop: int
    ) -> BatchOutcome:
        """Driver reads: ``emit``, then the emit statuses and each sink's statuses back
        for the driver's acker."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        derived_schema, stage_struct = self._fan_out_schemas(p)
        sinks = self._fan_out_sinks(p, batch_id)
        stage = df.mapInArrow(emit_mapper(p.emit, derived_schema, len(sinks)), stage_struct)
        stage = stage.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            derived = self._derived(stage, derived_schema)
            ok, error = F.col("_ok").alias("ok"), F.col("_error").alias("error")
            back = to_arrow(stage.select(ROW, ok, error, "_ack_val"))
            statuses = statuses_from_arrow(back, start, stop, missing_error="emit lost the record")
            ack_vals = np.zeros(stop - start, dtype=np.int64)
            rows = back.column(ROW).to_numpy(zero_copy_only=False)
            ack_vals[rows - start] = (
                back.column("_ack_val").fill_null(0).to_numpy(zero_copy_only=False)
            )
            answers = sink_statuses(sinks, derived, self.exprs)
            return BatchOutcome(statuses, None, ack_vals, answers)
        finally:
            stage.unpersist()

    def run_emitted(
        self,
        batch_id: int,
        stage: Any,
        collect: Collect,
        reported: Reported | None = None,
    ) -> BatchOutcome:
        """A fan-out whose ``emit`` already ran where its records were read: ``stage`` has
        the rows of :func:`~kinesis_spout.spark.process.fanout.stage_schema` (columns by
        name, others may be there too), made with :attr:`n_sinks` sinks (executor reads).
        Its sinks run, and its trees are settled in the statuses' Spark job
        (:mod:`~kinesis_spout.spark.process.settle`): ``collect`` brings their statuses
        back. When every sink wrote everything, ``reported`` may give the emit rows'
        partials the read tasks reported instead (None: it has none whole), and then no
        statuses' job runs (:mod:`~kinesis_spout.spark.read.reports`)."""
        p = self.processor
        if not isinstance(p, FanOutProcessor):
            raise TypeError(f"run_emitted runs fan-outs, not {type(p).__name__}")
        derived_schema, _ = self._fan_out_schemas(p)
        sinks = self._fan_out_sinks(p, batch_id)
        return self._settle(stage, derived_schema, sinks, collect, reported)

    def _fan_out_sinks(self, p: FanOutProcessor, batch_id: int) -> list[tuple[str, FanOutSink]]:
        target = self.sink_target if self._has_row_sink else None
        row_sink = None if self.sink_target is not None or not self._has_row_sink else self.row_sink
        return anchored_sinks(p, batch_id, target, row_sink)

    def _derived(self, stage: Any, derived_schema: pa.Schema) -> Any:
        """The derived records of an emit stage: ``_root``, ``_id`` and the derived fields."""
        return derived_frame(stage, derived_schema.names, self.exprs)

    def _settle(
        self,
        stage: Any,
        derived_schema: pa.Schema,
        sinks: list[tuple[str, FanOutSink]],
        collect: Collect,
        reported: Reported | None = None,
    ) -> BatchOutcome:
        """Each sink on the derived records, then the trees settled from what the read
        tasks reported, or else in the statuses' job."""
        derived = self._derived(stage, derived_schema)
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
