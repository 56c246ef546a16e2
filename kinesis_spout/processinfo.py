"""This process's name as a reader, and whether a process is alive (its start time from
``/proc``, so a reused pid does not count)."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def reader_id() -> str:
    """The process that reads a shard's range: ``host:pid``. Every executor read names
    its reader with it (a read task's results, the batch-end records of the Spark job's
    reads and of the streaming source's), once per plan, so it stays this cheap (Spark's
    executor id lives in the JVM, out of a Python worker's reach)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def process_start_time(pid: int) -> str | None:
    """The start time of ``pid`` (clock ticks since boot) or None if it is gone (or a
    zombie: dead, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:  # no /proc (not Linux): fall back to a signal-0 probe
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "?"
    # Fields after the command name (field 2, which may hold spaces): state is field 3,
    # the start time field 22. A zombie (killed, not yet reaped) is gone.
    fields = stat.rpartition(")")[2].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]
