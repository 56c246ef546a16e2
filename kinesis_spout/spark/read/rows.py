"""The rows of a micro-batch's read plans: numbered before the read, so the read tasks
number their records with no round trip to the driver, and renumbered ``0..n-1`` once
the read ends are known (:class:`RowSpace`); and the plans cut into read tasks
(:func:`split_tasks`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kinesis_spout.spark.plan import ReadPlan, ReadResult
from kinesis_spout.spark.process.arrow import ROW


class RowSpace:
    """The rows of a micro-batch's plans, numbered before the read: each plan gets as
    many rows as it may read (its limit, or its retries), from its *base* on. Once the
    read ends are known, :meth:`dense` renumbers the rows read ``0..n-1``, plan by plan,
    so the statuses and the per-plan results line up as with a read known beforehand."""

    def __init__(self, plans: list[ReadPlan]) -> None:
        self.tasks = [p.task for p in plans]
        self.index = {task: i for i, task in enumerate(self.tasks)}
        """Each plan's place in the micro-batch, by task number."""
        sizes = [p.size for p in plans]
        self.starts = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))[:-1]
        self.bases = dict(zip(self.tasks, self.starts.tolist(), strict=True))
        """The first row of each plan, by task number."""

    def order(self, results: list[ReadResult]) -> tuple[list[ReadResult], dict[int, int]]:
        """``results`` in plan order, and each plan's first row once only the records
        read are numbered (by task number)."""
        ordered = sorted(results, key=lambda r: self.index[r.task])
        dense: dict[int, int] = {}
        n = 0
        for res in ordered:
            dense[res.task] = n
            n += len(res)
        return ordered, dense

    def dense(self, table: pa.Table, results: list[ReadResult]) -> tuple[pa.Table, int]:
        """``table`` with its ``_row`` renumbered ``0..n-1`` (nulls stay), and ``n``."""
        counts = np.zeros(len(self.tasks), dtype=np.int64)
        firsts = np.zeros(len(self.tasks), dtype=np.int64)
        ordered, dense = self.order(results)
        for res in ordered:
            counts[self.index[res.task]] = len(res)
            firsts[self.index[res.task]] = dense[res.task]
        n = int(counts.sum())
        col = table.column(ROW)
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        rows = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        plan = np.searchsorted(self.starts, rows, side="right") - 1
        off = rows - self.starts[np.maximum(plan, 0)]
        inside = (plan >= 0) & (off < counts[np.maximum(plan, 0)])
        bad = valid & ~inside
        if bad.any():
            raise ValueError(f"status for row {int(rows[bad][0])}, which no read produced")
        renumbered = np.where(valid, firsts[np.maximum(plan, 0)] + off, 0)
        mask = ~valid if col.null_count else None
        return table.set_column(
            table.schema.get_field_index(ROW), ROW, pa.array(renumbered, pa.int64(), mask=mask)
        ), n


def split_tasks(plans: list[ReadPlan], tasks: int) -> list[list[ReadPlan]]:
    """The plans in ``tasks`` groups, in order (as ``parallelize`` slices them)."""
    n = len(plans)
    return [plans[i * n // tasks : (i + 1) * n // tasks] for i in range(tasks)]
