"""Who holds a job lease, and waiting for one: what every store's lease shares
(:mod:`~kinesis_spout.checkpoint.joblease` opens the lease of a store URL).

A holder's record names its host, pid, start time and what reads; a second reader's
error names the holder, and a holder that died on this host is seen gone at once.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from kinesis_spout.errors import KinesisSpoutError

log = logging.getLogger("kinesis_spout.checkpoint.joblease")


class JobLeaseHeldError(KinesisSpoutError):
    """Another driver of the same job holds the job lease."""


class JobLease(Protocol):
    """What the job needs of a lease, whatever the store."""

    def acquire(self, wait: bool = False, timeout: float | None = None) -> None:
        """Take the lease, or raise :class:`JobLeaseHeldError` (after ``timeout``
        seconds when waiting; None = wait until it is free)."""
        ...

    @property
    def lost(self) -> bool:
        """The lease was held and is gone (another driver may run now)."""
        ...

    on_lost: Callable[[], None] | None
    """Called when a held lease is lost (ZooKeeper, DynamoDB), e.g. to stop the job."""

    def release(self) -> None: ...


def holder_info(job_name: str, reader: str | None = None) -> dict[str, Any]:
    """Who holds a lease: written into the lock file or node (``reader``: what reads)."""
    from kinesis_spout.processinfo import process_start_time

    info: dict[str, Any] = {
        "job": job_name,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": process_start_time(os.getpid()),
        "since": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if reader:
        info["reader"] = reader
    return info


def holder_name(info: dict[str, Any]) -> str:
    """``host:pid`` of a holder's record, with ``(reader)`` when it says what reads."""
    name = f"{info['host']}:{info['pid']}"
    return f"{name} ({info['reader']})" if info.get("reader") else name


def holder_is_gone(raw: bytes | str | None) -> bool:
    """True if the holder recorded in ``raw`` ran on this host and has died.

    A ZooKeeper ephemeral node outlives a ``kill -9``-ed holder until its session
    expires (10 s or more); on the same host a dead pid (with the same start
    time, so a reused pid does not count) settles it at once. Anything unclear
    counts as alive.
    """
    from kinesis_spout.processinfo import process_start_time

    try:
        info = json.loads(raw or b"{}")
        host, pid, started = info["host"], int(info["pid"]), info.get("started")
    except (ValueError, KeyError, TypeError):
        return False
    if host != socket.gethostname():
        return False
    now = process_start_time(pid)
    return now is None or (started not in (None, "?") and now not in ("?", started))


def describe_holder(raw: bytes | str | None) -> str:
    """``host:pid (reader) since TIME`` from stored holder info (tolerates garbage)."""
    try:
        info = json.loads(raw or b"{}")
        return f"{holder_name(info)} since {info['since']}"
    except (ValueError, KeyError, TypeError):
        return "an unknown process"


WAIT_FLAG_HINT = "pass --wait-for-lease"
"""How the error of a second reader started from the command line says to wait."""


def held_error(job_name: str, holder: str, where: str) -> JobLeaseHeldError:
    """The error of a second reader of ``job_name``: who holds its lease, and where."""
    return JobLeaseHeldError(
        f"job {job_name!r} is already running (lease {where} held by {holder}); "
        f"stop it, or {WAIT_FLAG_HINT} to take over when it ends"
    )


class LeaseWaiter:
    """Polls ``try_once`` (None: taken; else who holds it) until it succeeds or ``timeout``
    passes, logging progress; every store's lease takes itself with it."""

    def __init__(
        self,
        try_once: Callable[[], str | None],
        sleep: Callable[[float], None] = time.sleep,
        interval: float = 0.5,
    ) -> None:
        self.try_once = try_once
        self.sleep = sleep
        self.interval = interval

    def run(self, job_name: str, where: str, wait: bool, timeout: float | None) -> None:
        holder = self.try_once()
        if holder is None:
            return
        if not wait:
            raise held_error(job_name, holder, where)
        start = time.monotonic()
        log.warning("job %r: waiting for the lease %s held by %s", job_name, where, holder)
        next_note = start + 30.0
        while holder is not None:
            now = time.monotonic()
            if timeout is not None and now - start >= timeout:
                raise held_error(job_name, holder, where)
            if now >= next_note:
                log.warning("job %r: still waiting (%.0fs) for %s", job_name, now - start, holder)
                next_note = now + 30.0
            self.sleep(self.interval)
            holder = self.try_once()
        log.info("job %r: lease %s taken after %.1fs", job_name, where, time.monotonic() - start)
