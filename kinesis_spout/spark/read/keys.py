"""The keys of the frame jobs that run, and the batch-end floor they allow.

Each Spark job of a transform or a fan-out records its read ends under a key of its own
(:mod:`~kinesis_spout.spark.read.recorded`), so a partition Spark computes again reads
what the first attempt read. Once no running job can need the ends below a key, the
driver removes them (the store's *floor*). :class:`JobKeys` says which floor is safe:
a key is taken and marked running in one step; a job given up past its deadline stops
holding the floor at once, and gets no new key (:class:`GivenUpError`); the floor never
goes down (the lowest key running, or the next key when none runs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class GivenUpError(RuntimeError):
    """A Spark job of a micro-batch the driver gave up was about to start."""


class JobKeys:
    """The running frame jobs' keys and the micro-batch (driver job) each belongs to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 1
        self._running: dict[int, int] = {}
        """Key -> the micro-batch it reads for."""
        self._given_up: set[int] = set()

    def begin(self, batch: int) -> int:
        """A key for a new Spark job of micro-batch ``batch``, running from now on;
        :class:`GivenUpError` if the driver gave ``batch`` up."""
        with self._lock:
            if batch in self._given_up:
                raise GivenUpError(f"micro-batch {batch} was given up: no new Spark job")
            key = self._next
            self._next += 1
            self._running[key] = batch
            return key

    def end(self, key: int) -> None:
        """The job of ``key`` returned (or failed); a no-op when it was given up."""
        with self._lock:
            self._running.pop(key, None)

    def give_up(self, batch: int) -> None:
        """The driver gave up micro-batch ``batch``: its jobs no longer hold the floor."""
        with self._lock:
            self._given_up.add(batch)  # a handful in a run: kept for its length
            for key in [k for k, b in self._running.items() if b == batch]:
                del self._running[key]

    def floor(self) -> int:
        """The lowest key whose ends a running job may still need."""
        with self._lock:
            return min(self._running, default=self._next)

    def if_running(self, key: int, action: Callable[[], None]) -> bool:
        """Run ``action`` unless the job of ``key`` was given up (or ended): atomically,
        so a give-up cannot slip in between; whether it ran."""
        with self._lock:
            if key not in self._running:
                return False
            action()
            return True
