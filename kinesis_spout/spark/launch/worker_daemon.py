"""PySpark's worker daemon, with SIGTERM turned into "stop the job".

``kinesis-spout run`` sets ``spark.python.daemon.module`` to this module. The
daemon is PySpark's own (:mod:`pyspark.daemon`); only its SIGTERM handler
changes: instead of exiting (which fails the tasks it runs, and Spark starts
another daemon), it forwards the signal to the job's Python driver, whose pid
the launcher's pid file holds. The driver finishes its batch, checkpoints and
exits; the JVM then ends this daemon as usual.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

PIDFILE_ENV = "KSPOUT_JOB_PIDFILE"  # same as kinesis_spout.spark.launch.launcher.PIDFILE_ENV

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def stop_the_driver() -> bool:
    """SIGTERM to the job's Python driver; False if its pid is not known."""
    path = os.environ.get(PIDFILE_ENV)
    if not path:
        return False
    try:
        pid = int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    return True


def _forwarding(daemon_handler: Callable[[int, FrameType | None], Any]) -> Handler:
    forwarded: list[bool] = []

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        # Once: the JVM itself ends the daemon with SIGTERM when the job stops.
        if forwarded or not stop_the_driver():
            daemon_handler(signum, frame)
        forwarded.append(True)

    return on_sigterm


class _SignalModule:
    """The :mod:`signal` module as :mod:`pyspark.daemon` sees it, but for SIGTERM handlers."""

    def __getattr__(self, name: str) -> Any:
        return getattr(signal, name)

    @staticmethod
    def signal(signum: int, handler: Handler) -> Handler:
        if signum == signal.SIGTERM and callable(handler):
            handler = _forwarding(handler)
        return signal.signal(signum, handler)


def main() -> None:
    import sys

    from kinesis_spout.spark.launch.sparkpath import prefer_installed_pyspark

    sys.path[:] = prefer_installed_pyspark(sys.path)
    from pyspark import daemon

    daemon.signal = _SignalModule()  # type: ignore[assignment,attr-defined]
    daemon.manager()


if __name__ == "__main__":
    main()
