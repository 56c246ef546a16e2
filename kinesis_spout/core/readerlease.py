"""The job lease of a :class:`~kinesis_spout.spout.KinesisSpout` (issue 26).

A spout in your own loop, the multilang process and anything built on the
spout read every shard of the job, as ``kinesis-spout run`` does; so they take
the same job lease (:mod:`kinesis_spout.checkpoint.joblease`): a second
reader with the same job name and checkpoint store fails naming the holder,
or waits with ``wait_for_lease``. Readers fenced otherwise opt out with
``job_lease=False``: the coordination worker and a multilang component of
several tasks (ZooKeeper shard leases), and the Spark job's driver (which
took the lease before Spark started). ``memory://`` stores take none.

States: ``idle -> held`` (``take``) ``-> released`` (``release``); ``held -> lost``
(ZooKeeper session expired, DynamoDB lease expired): ``check`` then raises, so the
spout stops handing out records another reader may now read.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kinesis_spout.checkpoint.joblease import (
    WAIT_FLAG_HINT,
    JobLease,
    JobLeaseHeldError,
    open_config_job_lease,
)
from kinesis_spout.config import SpoutConfig
from kinesis_spout.errors import KinesisSpoutError


class JobLeaseLostError(KinesisSpoutError):
    """The reader's job lease is gone (its ZooKeeper session or DynamoDB lease expired)."""


def reader_label(kind: str) -> str:
    """What reads, for the lease holder's record: ``KinesisSpout (loop.py)``."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return f"{kind} ({program})" if program else kind


class ReaderLease:
    """The job lease of one reader, if it takes one (``enabled``)."""

    def __init__(self, config: SpoutConfig, reader: str, enabled: bool = True) -> None:
        self.config = config
        self.reader = reader
        self.enabled = enabled
        self._lease: JobLease | None = None

    def take(self) -> None:
        """Take the lease (waiting if ``wait_for_lease``), or raise
        :class:`~kinesis_spout.checkpoint.joblease.JobLeaseHeldError` naming the holder."""
        if not self.enabled or self._lease is not None:
            return
        lease = open_config_job_lease(self.config, self.reader)
        try:
            lease.acquire(wait=self.config.wait_for_lease)
        except JobLeaseHeldError as exc:  # a reader in Python code: name the config key
            lease.release()
            said = str(exc).replace(WAIT_FLAG_HINT, "set wait_for_lease = true")
            raise JobLeaseHeldError(said) from None
        except BaseException:
            lease.release()
            raise
        self._lease = lease

    def check(self) -> None:
        """Raise :class:`JobLeaseLostError` if a held lease was lost."""
        if self._lease is not None and self._lease.lost:
            raise JobLeaseLostError(
                f"job {self.config.job_name!r}: the job lease was lost (ZooKeeper session "
                "expired, or DynamoDB lease not renewed in time); another reader may be "
                "running: this one stops"
            )

    def release(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()
