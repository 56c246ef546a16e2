"""The job's watch on its launcher (hole 8), on real processes."""

from __future__ import annotations

import subprocess
import sys
import threading

from kinesis_spout.spark.launcher import LauncherWatch, launcher_alive, launcher_token


def test_a_token_names_a_live_process_and_not_a_reused_pid() -> None:
    me = launcher_token()
    assert launcher_alive(me)
    pid, _, start = me.partition(":")
    assert not launcher_alive(f"{pid}:{int(start) + 12345}")  # same pid, another process


def test_the_watch_calls_back_when_the_launcher_dies_then_exits_if_still_alive() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    gone = threading.Event()
    exited: list[int] = []
    done = threading.Event()

    def hard_exit(code: int) -> None:
        exited.append(code)
        done.set()

    watch = LauncherWatch(
        launcher_token(proc.pid), gone.set, interval=0.02, exit_after=0.2, hard_exit=hard_exit
    ).start()
    assert not gone.wait(0.2)
    proc.kill()
    proc.wait()
    assert gone.wait(5)
    assert done.wait(5) and exited == [1]
    watch.stop()


def test_a_stopped_watch_neither_calls_back_nor_exits() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    called: list[str] = []
    watch = LauncherWatch(
        launcher_token(proc.pid),
        lambda: called.append("gone"),
        interval=0.02,
        exit_after=0.1,
        hard_exit=lambda code: called.append("exit"),
    ).start()
    watch.stop()
    proc.kill()
    proc.wait()
    threading.Event().wait(0.3)
    assert called == []
