"""``kinesis-spout run``'s signal forwarding, with stand-in processes (no Spark).

The stand-in for ``spark-submit`` reports whether it inherited SIGINT/SIGTERM
as ignored (SIGINT is, so a stray Ctrl-C does not end the JVM under the Python
driver; SIGTERM is not, so a SIGTERM sent to the JVM stops the job) and
starts a stand-in job that writes its pid file and exits 0 on SIGTERM, as
the real job does after its last batch and checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kinesis_spout.testing.processes import OutputLines, wait_until

pytestmark = pytest.mark.integration

FAKE_SUBMIT = """
import os, signal, subprocess, sys
ignored = [signal.getsignal(s) is signal.SIG_IGN for s in (signal.SIGINT, signal.SIGTERM)]
print("submit: ignored", ignored, flush=True)
sys.exit(subprocess.call([sys.executable, sys.argv[1]]))
"""

FAKE_JOB = """
import os, signal, sys, time
from pathlib import Path
def stop(signum, frame):
    print("job: got", signal.Signals(signum).name, "- checkpointing and exiting", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
Path(os.environ["KSPOUT_JOB_PIDFILE"]).write_text(str(os.getpid()))
print("job: running", flush=True)
time.sleep(60)
sys.exit(3)
"""

WATCHED = (signal.SIGINT, signal.SIGTERM)


def signals_caught(pid: int) -> set[int]:
    """The signals ``pid`` has handlers for (``SigCgt`` in ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            mask = int(line.split()[1], 16)
            return {n for n in range(1, 65) if mask & (1 << (n - 1))}
    return set()


def wait_until_forwarding(proc: subprocess.Popen[str], output: OutputLines) -> None:
    """Until the job runs (its pid file is written before it says so) and the
    supervisor has its SIGINT/SIGTERM handlers in place."""
    output.wait_for("job: running", timeout=30)
    wait_until(
        lambda: set(WATCHED) <= signals_caught(proc.pid),
        10,
        "the supervisor's SIGINT/SIGTERM handlers",
        seen=lambda: sorted(signals_caught(proc.pid)),
    )


SUPERVISOR = """
import sys
from kinesis_spout.spark.submit import supervise, job_environment
sys.exit(supervise([sys.executable, sys.argv[1], sys.argv[2]], job_environment()))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_first_signal_reaches_the_job_alone_and_it_exits_cleanly(
    tmp_path: Path, sig: signal.Signals
) -> None:
    submit = tmp_path / "submit.py"
    submit.write_text(FAKE_SUBMIT)
    job = tmp_path / "job.py"
    job.write_text(FAKE_JOB)
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(submit), str(job)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = OutputLines(proc, "the supervisor")
    wait_until_forwarding(proc, output)
    os.kill(proc.pid, sig)
    proc.wait(timeout=30)
    text = output.text()
    assert proc.returncode == 0, text
    # SIGINT is ignored under the driver; SIGTERM is not (hole 8: a SIGTERM sent to the
    # JVM itself ends it, and the driver, which watches it, stops cleanly).
    assert "submit: ignored [True, False]" in text
    assert "job: got SIGTERM - checkpointing and exiting" in text


def test_a_second_signal_kills_the_whole_group(tmp_path: Path) -> None:
    submit = tmp_path / "submit.py"
    submit.write_text(FAKE_SUBMIT)
    job = tmp_path / "job.py"
    job.write_text(FAKE_JOB.replace("sys.exit(0)", "pass  # ignores the request"))
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(submit), str(job)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = OutputLines(proc, "the supervisor")
    wait_until_forwarding(proc, output)
    os.kill(proc.pid, signal.SIGTERM)
    output.wait_for("job: got SIGTERM", timeout=30)  # forwarded, and ignored
    assert proc.poll() is None  # the job ignored the polite request
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode == 128 + signal.SIGKILL, output.text()
