"""What a transform or an anchored sink must return: its status columns.

A transform keeps ``_row`` and adds ``status`` (boolean, or a string where
``"ok"`` is success) and optionally ``error``; a fan-out's sink that returns
statuses keeps ``_root`` and ``_id`` likewise. :func:`ok_and_error` checks that
and turns them into the two columns the runner reads back; anything else is a
:class:`ProcessingContractError` (a bug to fix, so the job stops).
"""

from __future__ import annotations

from typing import Any

from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.spark.process.exprs import Exprs


class ProcessingContractError(KinesisSpoutError):
    """The processing's output breaks its contract (a missing ``_row`` or
    ``status`` column, a status of the wrong type): a bug to fix, so the job
    stops instead of failing records."""


def ok_and_error(df: Any, what: str, key: str, exprs: Exprs) -> tuple[Any, Any]:
    """Spark columns ``ok`` (boolean, never null) and ``error`` from ``status``/``error``
    (``exprs``: where they are kept between micro-batches)."""
    from pyspark.sql import types as T

    cols = set(df.columns)
    for need in (key, "status"):
        if need not in cols:
            raise ProcessingContractError(
                f"{what} returned columns {sorted(cols)}: it must keep {key!r} and add 'status' "
                "(boolean, or 'ok' for success) and optionally 'error'"
            )
    dtype = df.schema["status"].dataType
    if not isinstance(dtype, T.BooleanType | T.StringType):
        raise ProcessingContractError(
            f"{what}: column 'status' has type {dtype.simpleString()}: expected boolean or string"
        )
    boolean, has_error = isinstance(dtype, T.BooleanType), "error" in cols
    ok, error = exprs.get(
        ("ok and error", what, boolean, has_error),
        lambda: _status_columns(what, boolean, has_error),
    )
    return ok, error


def _status_columns(what: str, boolean: bool, has_error: bool) -> tuple[Any, Any]:
    from pyspark.sql import functions as F

    if boolean:
        ok = F.coalesce(F.col("status"), F.lit(False))
        fallback = F.lit(None).cast("string")
    else:
        ok = F.coalesce(F.lower(F.trim(F.col("status"))) == F.lit("ok"), F.lit(False))
        fallback = F.col("status")
    error = F.col("error").cast("string") if has_error else F.lit(None).cast("string")
    error = F.when(~ok, F.coalesce(error, fallback, F.lit(f"{what} reported a failure")))
    return ok.alias("ok"), error.alias("error")
