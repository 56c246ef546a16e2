"""The job's tie to its launcher: when ``kinesis-spout run`` dies, the job stops.

``kinesis-spout run`` starts ``spark-submit`` in a session of its own (so a
terminal's Ctrl-C reaches the job only through the launcher, politely). If the
launcher is killed outright (``kill -9``) nothing would tell the job, so the
launcher names itself in :data:`LAUNCHER_ENV` (``pid:start-time``, the start
time from ``/proc`` guards against a reused pid) and the job's driver watches
it: when it is gone the driver finishes its batch, checkpoints and exits (then
the JVM ends, and its PySpark workers with it); if that takes longer than a
grace period the driver exits at once (nothing done is lost: at least once).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from kinesis_spout.processinfo import process_start_time

log = logging.getLogger(__name__)

LAUNCHER_ENV = "KSPOUT_LAUNCHER"
PIDFILE_ENV = "KSPOUT_JOB_PIDFILE"
"""Set by ``kinesis-spout run``: where the job writes its pid (to forward signals)."""


def exit_now(code: int) -> None:
    """``os._exit(code)``, first removing the job's pid file if it names this process
    (a hard exit skips every ``finally``; a stale pid file would be left behind)."""
    pidfile = os.environ.get(PIDFILE_ENV)
    if pidfile:
        try:
            with open(pidfile) as fh:
                if fh.read().strip() == str(os.getpid()):
                    os.unlink(pidfile)
        except OSError:
            pass
    os._exit(code)


def launcher_token(pid: int | None = None) -> str:
    """``pid:start-time`` of this process (or ``pid``), for :data:`LAUNCHER_ENV`."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{process_start_time(pid) or '?'}"


def launcher_alive(token: str) -> bool:
    pid_s, _, start = token.partition(":")
    now = process_start_time(int(pid_s))
    return now is not None and (start in ("", "?") or now in ("?", start))


class LauncherWatch:
    """A daemon thread that calls ``on_gone`` once the launcher has died.

    ``on_gone`` runs on the watch thread; ``exit_after`` seconds later, if the
    process is still alive, ``hard_exit`` ends it.
    """

    def __init__(
        self,
        token: str,
        on_gone: Callable[[], None],
        *,
        interval: float = 0.5,
        exit_after: float = 60.0,
        hard_exit: Callable[[int], None] = exit_now,
    ) -> None:
        int(token.partition(":")[0])  # a malformed token is a bug of the launcher: fail now
        self.token = token
        self.on_gone = on_gone
        self.interval = interval
        self.exit_after = exit_after
        self.hard_exit = hard_exit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="launcher-watch", daemon=True)

    def start(self) -> LauncherWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if not launcher_alive(self.token):
                break
        else:
            return
        log.error("the launcher (pid %s) is gone: stopping the job", self.token.partition(":")[0])
        self.on_gone()
        if not self._stop.wait(self.exit_after):
            log.error("the job did not stop within %.0fs of its launcher: exiting", self.exit_after)
            self.hard_exit(1)


def watch_parent(
    on_gone: Callable[[], None], *, interval: float = 0.5, exit_after: float = 60.0
) -> LauncherWatch | None:
    """Watch this process's parent (the JVM of ``spark-submit``), when run by the launcher."""
    if not os.environ.get(LAUNCHER_ENV):
        return None
    token = launcher_token(os.getppid())
    return LauncherWatch(token, on_gone, interval=interval, exit_after=exit_after).start()


def watch_launcher(
    on_gone: Callable[[], None], *, interval: float = 0.5, exit_after: float = 60.0
) -> LauncherWatch | None:
    """Start watching the launcher named in the environment, if any."""
    token = os.environ.get(LAUNCHER_ENV)
    if not token:
        return None
    return LauncherWatch(token, on_gone, interval=interval, exit_after=exit_after).start()
