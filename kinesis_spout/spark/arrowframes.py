"""Arrow tables in and out of Spark DataFrames, on Spark 4.x and 3.5 alike.

Spark 4.0 added ``DataFrame.toArrow()``, ``createDataFrame`` of a ``pyarrow.Table``,
``StructType.fromDDL`` and ``to_arrow_schema``'s time zone; Spark 3.5 (EMR 7, many
Databricks runtimes) has none of them. There, a DataFrame comes back through
``_collect_as_arrow`` (what its ``toPandas`` uses: the same Arrow batches), a table goes
in through pandas with its Arrow schema, a DDL string is parsed by the function
``fromDDL`` calls, and timestamps are UTC in Arrow anyway. The job's code calls these
functions, never the 4.0 methods themselves.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa


def to_arrow(frame: Any) -> pa.Table:
    """``frame`` collected to the driver as an Arrow table."""
    method = getattr(frame, "toArrow", None)
    if method is not None:
        table: pa.Table = method()
        return table
    from pyspark.sql.pandas.types import to_arrow_schema

    batches = frame._collect_as_arrow()
    if batches:
        return pa.Table.from_batches(batches)
    return to_arrow_schema(frame.schema).empty_table()


def from_arrow(spark: Any, table: pa.Table) -> Any:
    """A DataFrame of ``table`` (local data, shipped in the tasks)."""
    if _takes_arrow(spark):
        return spark.createDataFrame(table)
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame(table.to_pandas(), schema=from_arrow_schema(table.schema))


def _takes_arrow(spark: Any) -> bool:
    """``createDataFrame`` takes a ``pyarrow.Table`` (Spark 4.0 on)."""
    major = str(getattr(spark, "version", "4")).split(".", 1)[0]
    return not major.isdigit() or int(major) >= 4


def ddl_struct(ddl: str) -> Any:
    """The ``StructType`` of a DDL string (on the driver: it asks the JVM)."""
    from pyspark.sql import types

    parse = getattr(types.StructType, "fromDDL", None) or types._parse_datatype_string
    return parse(ddl)


def arrow_schema(struct: Any) -> pa.Schema:
    """The Arrow schema of a ``StructType``, its timestamps in UTC."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        schema: pa.Schema = to_arrow_schema(struct, timezone="UTC")
    except TypeError:  # Spark 3.5: no time zone argument (its timestamps are UTC)
        schema = to_arrow_schema(struct)
    return schema
