"""Poison isolation: which records fail a micro-batch, and whether they are poison.

A micro-batch that fails as a whole (a Spark job that fails, an exception from
the processing) is split in two and each half run again (:func:`run_split`),
down to single records, within a split budget. Records that fail alone are then
judged (:class:`PoisonJudge`): poison, to be failed (retried, then
dead-lettered), or the sign of a systematic error (nothing works), which stops
the job with nothing failed, so no good record is dead-lettered because, say,
Spark went away.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.records import Record
from kinesis_spout.spark.process.arrow import Statuses, format_error
from kinesis_spout.spark.process.ledger import TreeResults
from kinesis_spout.spark.process.runner import BatchOutcome, ProcessingContractError

log = logging.getLogger(__name__)

LONE_FAILURES = 2
"""Records failing alone in a batch where nothing else ran that are still
treated as poison (when the batch before ran fine)."""

POISON_MEMORY = 10_000
"""Message ids remembered as having failed alone (their retries are poison too)."""


@dataclass(slots=True)
class Isolation:
    """Book-keeping of one batch's splitting after batch-level failures."""

    splits_left: int
    splits: int = 0
    succeeded: bool = False
    exhausted: bool = False
    alone: dict[int, str] = field(default_factory=dict)
    last_error: str = ""


class BatchFailedError(KinesisSpoutError):
    """A micro-batch kept failing as a whole, even split into small parts."""

    retriable = True


def run_split(
    run: Callable[[int, int], BatchOutcome],
    iso: Isolation,
    done: list[BatchOutcome],
    start: int,
    stop: int,
    *,
    batch_id: int,
    stopping: Callable[[], bool],
) -> None:
    """Run rows ``start..stop-1``; on a batch-level failure split in two.

    Successful outcomes go to ``batch.done``; records that fail alone to
    ``batch.iso.alone``: :meth:`PoisonJudge.settle` decides later whether they are
    poison (failed) or the failure is systematic (the job stops).
    """
    try:
        outcome = run(start, stop)
    except ProcessingContractError:
        raise
    except Exception as exc:
        error = format_error(exc)
        iso.last_error = error
        if stopping():
            # Shutting down (Spark may be going away with us): leave these
            # records in flight; they are not checkpointed and come back
            # after a restart, without costing a retry.
            log.warning(
                "abandoning rows %d..%d of micro-batch %d while stopping: %s",
                start,
                stop - 1,
                batch_id,
                error,
            )
            return
        if stop - start == 1:
            iso.alone[start] = error
            return
        if iso.splits_left <= 0:
            iso.exhausted = True
            return
        iso.splits_left -= 1
        iso.splits += 1
        mid = (start + stop) // 2
        log.warning(
            "micro-batch %d rows %d..%d failed (%s): splitting in two",
            batch_id,
            start,
            stop - 1,
            error,
        )
        for lo, hi in ((start, mid), (mid, stop)):
            run_split(run, iso, done, lo, hi, batch_id=batch_id, stopping=stopping)
        return
    iso.succeeded = True
    done.append(outcome)


class PoisonJudge:
    """Remembers lone failures across batches, and whether the last batch ran."""

    def __init__(self) -> None:
        self.healthy = False
        """The last batch ran (Spark and the processing worked a moment ago)."""
        self.poison: dict[str, None] = {}
        """Message ids that failed alone (their retries are poison too), oldest first."""

    def settle(
        self,
        batch_id: int,
        iso: Isolation,
        owners: Sequence[Record],
        apply: Callable[[BatchOutcome], TreeResults],
    ) -> list[TreeResults]:
        """Fail the records that failed alone if they look like poison; else stop.

        They are poison when another part of the batch ran, when all of them
        failed alone before (a retry of a known poison record), or when there
        are at most :data:`LONE_FAILURES` of them and the previous batch ran
        (Spark and the code worked a moment ago). Otherwise nothing has worked:
        the error is systematic and the job stops with nothing failed.
        """
        ids = [owners[row].message_id for row in iso.alone]
        known = bool(ids) and all(mid in self.poison for mid in ids)
        healthy_before = self.healthy
        if iso.succeeded:
            self.healthy = True
        elif not known:
            self.healthy = False
        if iso.exhausted or (iso.alone and not iso.succeeded):
            lone_ok = not iso.exhausted and (
                known or (healthy_before and len(iso.alone) <= LONE_FAILURES)
            )
            if not (iso.succeeded or lone_ok):
                raise BatchFailedError(
                    f"micro-batch {batch_id} failed as a whole even when split {iso.splits} "
                    f"times ({len(iso.alone)} records failing alone"
                    f"{', split budget used up' if iso.exhausted else ''}); the unfinished "
                    f"records stay unacknowledged for a restart; last error: {iso.last_error}"
                )
        for mid in ids:
            self.poison[mid] = None
        while len(self.poison) > POISON_MEMORY:
            del self.poison[next(iter(self.poison))]
        out: list[TreeResults] = []
        for row, error in sorted(iso.alone.items()):
            log.warning(
                "record %s fails its micro-batch on its own: %s", owners[row].message_id, error
            )
            single = Statuses(row, row + 1, np.zeros(1, dtype=bool), {row: error})
            out.append(apply(BatchOutcome(single)))
        if iso.exhausted:
            raise BatchFailedError(
                f"micro-batch {batch_id}: more records fail it as a whole than {iso.splits} "
                f"splits can isolate; last error: {iso.last_error}"
            )
        return out
