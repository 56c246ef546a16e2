"""The job's watch on its launcher (hole 8), on real processes."""

from __future__ import annotations

import subprocess
import sys
import threading

from kinesis_spout.spark.launch.launcher import LauncherWatch, launcher_alive, launcher_token


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


def test_a_killed_process_not_yet_reaped_counts_as_gone() -> None:
    # After kill -9 a process stays a zombie until its parent reaps it; a job lease
    # or a launcher watch must not take the zombie for a live holder.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    token = launcher_token(proc.pid)
    assert launcher_alive(token)
    proc.kill()
    for _ in range(200):  # wait for the kernel to make it a zombie (we do not reap it)
        if not launcher_alive(token):
            break
        threading.Event().wait(0.01)
    assert not launcher_alive(token)
    proc.wait()
