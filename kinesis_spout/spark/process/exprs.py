"""Spark column expressions built once per job and reused by every micro-batch.

A pyspark ``Column`` is a handle on a JVM object: making one (``F.col``, ``F.lit``,
an operator on columns) costs the driver py4j round trips, and dropping it one more
(py4j's finalizer tells the JVM to let go). The DataFrame styles' micro-batches
built the same few dozen expressions each time, and those round trips were most of
the driver's CPU per micro-batch. An expression names columns, it is not bound to
a DataFrame, so one serves every micro-batch of the session.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


class Exprs:
    """Expressions by key, each made by its ``make`` the first time it is asked for."""

    def __init__(self) -> None:
        self._made: dict[Hashable, Any] = {}

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The expression (or tuple of them) under ``key``; ``make()`` makes it once."""
        try:
            return self._made[key]
        except KeyError:
            made = self._made[key] = make()
            return made

    def columns(self, *names: str) -> list[Any]:
        """``F.col`` of each name, in order (for ``select``)."""
        from pyspark.sql import functions as F

        return list(self.get(("columns", names), lambda: tuple(F.col(n) for n in names)))
