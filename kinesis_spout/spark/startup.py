"""Where a job's start-up time goes, said in one DEBUG line.

``kinesis-spout run -v`` prints, once the first micro-batch is back::

    startup: imports 0.35s | config 0.01s | lease 0.00s | spark session 4.10s | ...

Each phase is the time since the previous mark (the first since
``started``: the entry point's first line, or the driver's creation).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class StartupTimes:
    """Named phases of a start, each the time since the previous one."""

    def __init__(
        self, started: float | None = None, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._clock = clock
        self._started = clock() if started is None else started
        self._last = self._started
        self.phases: list[tuple[str, float]] = []
        self.finished = False

    def mark(self, phase: str) -> None:
        """``phase`` ended now (ignored once the start is finished)."""
        if self.finished:
            return
        now = self._clock()
        self.phases.append((phase, now - self._last))
        self._last = now

    def finish(self, phase: str) -> None:
        """The last phase ended: say the whole start at DEBUG, once."""
        if self.finished:
            return
        self.mark(phase)
        self.finished = True
        log.debug("%s", self.line())

    @property
    def total(self) -> float:
        return self._last - self._started

    def line(self) -> str:
        parts = " | ".join(f"{name} {seconds:.2f}s" for name, seconds in self.phases)
        return f"startup: {parts} | total {self.total:.2f}s"
