"""The job process of a chaos run: ``spark-submit`` in a session of its own, killed as a
group with SIGKILL, with a check that nothing of it survived."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

from devkit.chaos.plan import ChaosError


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``, from ``/proc``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            out.append(int(entry.name))
    return out


class JobProcess:
    """One run of the job: a command in a new session, output to a log file.

    :meth:`kill` sends SIGKILL to the whole process group (spark-submit, the
    JVM, the Python driver and the Python workers) and waits until no process
    of the session is left.
    """

    def __init__(self, command: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
        self.command = list(command)
        self.env = dict(env)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> Self:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.started_at = time.monotonic()
        return self

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise ChaosError("job not started")
        return self.proc.pid

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def pause(self) -> None:
        """SIGSTOP every process of the session: nothing of the job runs, writes or saves
        until :meth:`resume` (or :meth:`kill`, which kills stopped processes as well)."""
        self._signal_session(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT every process of the session (after :meth:`pause`)."""
        self._signal_session(signal.SIGCONT)

    def _signal_session(self, sig: signal.Signals) -> None:
        pid = self.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        for p in session_members(pid):  # a process that changed its group
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, sig)

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL the process group and wait for every process of it to be gone."""
        pid = self.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(timeout)
        deadline = time.monotonic() + timeout
        while True:
            left = session_members(pid)
            if not left:
                return
            if time.monotonic() > deadline:
                raise ChaosError(f"processes {left} of the killed job (session {pid}) survived")
            for p in left:  # a process that changed its group escaped killpg
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.05)

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def job_command(config_path: Path, master: str) -> list[str]:
    """``spark-submit ... kinesis_spout/spark/job.py --config FILE`` (quiet defaults)."""
    from kinesis_spout.spark.submit import DEFAULT_CONF, find_spark_submit, job_file

    conf = {**DEFAULT_CONF, "spark.ui.enabled": "false"}
    cmd = [find_spark_submit(), "--master", master]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, str(job_file()), "--config", str(config_path)]
