"""A hard exit of the job (its launcher gone while it starts) leaves no stale pid file.

Fails on the old code: ``os._exit`` skipped the ``finally`` that removed the pid file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXIT = (
    "from kinesis_spout.spark.launch.launcher import exit_now; import os, sys; {write}; exit_now(7)"
)


def run(pidfile: Path, write: str) -> int:
    env = os.environ | {"KSPOUT_JOB_PIDFILE": str(pidfile)}
    proc = subprocess.run([sys.executable, "-c", EXIT.format(write=write)], env=env, timeout=60)
    return proc.returncode


def test_a_hard_exit_removes_the_pid_file_naming_this_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "job.pid"
    code = run(pidfile, f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))")
    assert code == 7 and not pidfile.exists()


def test_a_hard_exit_keeps_a_pid_file_of_another_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "job.pid"
    pidfile.write_text("1")
    assert run(pidfile, "pass") == 7 and pidfile.read_text() == "1"
