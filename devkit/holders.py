"""A job-lease holder in a process of its own, for tests of the job lease."""

from __future__ import annotations

import os
import subprocess
import sys

_HOLDER = """
import sys, time
from kinesis_spout.checkpoint.joblease import open_job_lease
lease = open_job_lease(sys.argv[1], sys.argv[2])
lease.acquire()
print("held", flush=True)
time.sleep(600)
"""


def start_lease_holder(store_url: str, job_name: str) -> subprocess.Popen[str]:
    """A process that holds ``job_name``'s lease (as a running driver would) until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, store_url, job_name],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "held":
        proc.kill()
        raise RuntimeError(f"the lease holder did not start (said {line!r})")
    return proc
