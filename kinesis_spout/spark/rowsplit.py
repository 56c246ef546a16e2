"""Poison isolation of driver reads: the rows of a micro-batch.

The shared logic is :mod:`kinesis_spout.spark.isolation`; this is what is driver
reads' own. The records are on the driver already, so a micro-batch that fails as a whole
is a range of rows halved down to single rows (:data:`ROWS`); a row that fails
alone is failed from there, with its error, once the judge finds it poison.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from kinesis_spout.records import Record
from kinesis_spout.spark.isolation import Cut, Isolation, PoisonJudge, Wording, run_split
from kinesis_spout.spark.process.arrow import Statuses
from kinesis_spout.spark.process.ledger import TreeResults
from kinesis_spout.spark.process.runner import BatchOutcome

log = logging.getLogger(__name__)


def _halves(rows: range) -> list[range]:
    if len(rows) == 1:
        return []
    mid = (rows.start + rows.stop) // 2
    return [range(rows.start, mid), range(mid, rows.stop)]


ROWS: Cut[range, BatchOutcome, int] = Cut(
    halves=_halves,
    lone=lambda rows: rows.start,
    describe=lambda rows: f"rows {rows.start}..{rows.stop - 1}",
)
"""A range of rows, halved down to one row (that row then fails alone)."""

ROW_WORDS = Wording(
    lone="records",
    left="the unfinished records stay unacknowledged for a restart",
    over="records fail it as a whole",
    runs="splits",
)


def split_rows(
    run: Callable[[int, int], BatchOutcome],
    iso: Isolation[int],
    rows: int,
    *,
    batch_id: int,
    stopping: Callable[[], bool],
) -> list[BatchOutcome]:
    """The outcomes of rows ``0..rows-1`` run by ``run(start, stop)``, split after
    failures; the rows that failed alone go to ``iso.alone``."""
    return run_split(
        lambda part: [run(part.start, part.stop)],
        ROWS,
        iso,
        range(rows),
        batch_id=batch_id,
        stopping=stopping,
    )


def settle_rows(
    judge: PoisonJudge,
    batch_id: int,
    iso: Isolation[int],
    owners: Sequence[Record],
    apply: Callable[[BatchOutcome], TreeResults],
) -> list[TreeResults]:
    """Fail the rows that failed alone if the judge finds them poison (else it stops
    the job); then stop the job if the split budget ran out."""
    judge.judge(batch_id, iso, [owners[row].message_id for row, _ in iso.alone])
    out: list[TreeResults] = []
    for row, error in sorted(iso.alone):
        log.warning("record %s fails its micro-batch on its own: %s", owners[row].message_id, error)
        single = Statuses(row, row + 1, np.zeros(1, dtype=bool), {row: error})
        out.append(apply(BatchOutcome(single)))
    judge.raise_if_exhausted(batch_id, iso)
    return out
