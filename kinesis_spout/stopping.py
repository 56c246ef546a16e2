"""Stopping a reading loop cleanly on SIGTERM or SIGINT: :class:`StopSignals`.

``docker stop`` and Kubernetes send SIGTERM, and Python's default action for it ends the
process at once: no ``finally``, no final checkpoint. In a :class:`StopSignals` block the
first SIGTERM or SIGINT only sets :attr:`~StopSignals.requested` (and wakes
:meth:`~StopSignals.sleep`), so the loop finishes its batch and leaves, and the spout's
``with`` block writes the final checkpoint; a second signal raises
:class:`KeyboardInterrupt` at once. Enter it before the spout, from the main thread (the
usage: README and docs/reader.md).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Sequence
from types import FrameType, TracebackType
from typing import Any

from kinesis_spout.errors import KinesisSpoutError

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """The first of ``signals`` asks the loop to stop; a second interrupts it.

    States: ``running -> stop requested`` (first signal) ``-> interrupted``
    (second signal: :class:`KeyboardInterrupt`). Leaving the block puts the
    previous handlers back.
    """

    def __init__(self, signals: Sequence[signal.Signals] = DEFAULT_SIGNALS) -> None:
        self.signals = tuple(signals)
        self.reason: str | None = None
        """The name of the first signal received (``"SIGTERM"``), None until then."""
        self._previous: dict[signal.Signals, Any] = {}
        self._wake: tuple[int, int] | None = None

    @property
    def requested(self) -> bool:
        """A stop was asked for: finish the current batch and leave the loop."""
        return self.reason is not None

    def request(self, reason: str = "requested") -> None:
        """Ask the loop to stop, as a signal does (for a stop from elsewhere in the loop)."""
        if self.reason is None:
            self.reason = reason
        if self._wake is not None:
            with contextlib.suppress(OSError):  # the pipe is full: it is awake already
                os.write(self._wake[1], b"x")

    def sleep(self, seconds: float) -> None:
        """Sleep up to ``seconds``; return at once when a stop is (or was) requested."""
        if self.requested or seconds <= 0:
            return
        if self._wake is None:
            raise KinesisSpoutError("StopSignals.sleep: use it inside its with block")
        select.select([self._wake[0]], [], [], seconds)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested:
            raise KeyboardInterrupt(name)
        # os.write, not print or logging: the main thread may be inside either.
        os.write(2, f"{name}: stopping after the current batch (final checkpoint)\n".encode())
        self.request(name)

    def __enter__(self) -> StopSignals:
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._wake = (r, w)
        try:
            for s in self.signals:
                self._previous[s] = signal.signal(s, self._on_signal)
        except ValueError as exc:  # not the main thread
            self.__exit__(None, None, None)
            raise KinesisSpoutError(f"StopSignals: {exc} (use it in the main thread)") from None
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for s, previous in self._previous.items():
            signal.signal(s, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()
        wake, self._wake = self._wake, None
        if wake is not None:
            for fd in wake:
                os.close(fd)
