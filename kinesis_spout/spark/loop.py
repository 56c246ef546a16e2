"""What both micro-batch loops share: stop requests, the run's summary and the
times of its start."""

from __future__ import annotations

import logging
from collections.abc import Callable

from kinesis_spout.spark.launch.startup import StartupTimes
from kinesis_spout.spark.reports import JobSummary, RunTotals, SpoutLike

log = logging.getLogger(__name__)

MIN_WAIT = 0.005
"""Shortest wait when nothing is ready (guards against a 0 delay)."""
MAX_WAIT = 0.5
"""Longest single wait, so that a stop request is seen quickly."""


class StopControl:
    """Stop requests (first reason wins), the totals behind the summary, and the
    start-up phases (the entry point may hand in its own, begun at its first line)."""

    def __init__(self) -> None:
        self._stop_reason: str | None = None
        self._totals = RunTotals()
        self.startup = StartupTimes()

    def request_stop(self, reason: str = "stop requested") -> None:
        """Finish the current batch, then stop (safe to call from a signal handler)."""
        if self._stop_reason is None:
            self._stop_reason = reason

    @property
    def stopping(self) -> bool:
        return self._stop_reason is not None

    def summary(self, seconds: float) -> JobSummary:
        return self._totals.summary(seconds, self._stop_reason or "running")


def shut_down(
    spout: SpoutLike,
    failure: BaseException | None,
    reason: str | None,
    then: Callable[[], None] | None = None,
) -> None:
    """The end of a run: stop emitting, a forced checkpoint of what is done, close the
    spout (then ``then``). After an error, a failing checkpoint is logged, not raised."""
    try:
        spout.deactivate()
        spout.checkpoint(force=True)
    except Exception:
        if failure is None:
            raise
        log.exception("final checkpoint failed while stopping after an error")
    finally:
        try:
            spout.close()
        finally:
            if then is not None:
                then()
    log.info("driver stopped: %s", reason)
