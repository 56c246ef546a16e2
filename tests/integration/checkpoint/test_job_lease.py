"""The job lease (hole 4): one driver per job name, on real files, a real ZooKeeper and
DynamoDB (moto's server)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import pytest

from devkit.holders import start_lease_holder
from kinesis_spout.checkpoint.joblease import JobLease, JobLeaseHeldError, open_job_lease

pytestmark = pytest.mark.integration


@pytest.fixture(params=["file", "zk", "dynamodb"])
def store_url(request: pytest.FixtureRequest, store_url_of: Callable[[str], str]) -> str:
    return store_url_of(str(request.param))


@pytest.fixture
def leases(store_url: str) -> Callable[[str], JobLease]:
    made: list[JobLease] = []

    def make(job: str) -> JobLease:
        lease = open_job_lease(store_url, job)
        made.append(lease)
        return lease

    yield make  # type: ignore[misc]
    for lease in made:
        lease.release()


def test_a_second_driver_gets_an_error_naming_the_job_and_the_holder(
    leases: Callable[[str], JobLease],
) -> None:
    first = leases("billing")
    first.acquire()
    second = leases("billing")
    with pytest.raises(JobLeaseHeldError) as info:
        second.acquire()
    message = str(info.value)
    assert "job 'billing' is already running" in message
    assert f":{os.getpid()} since " in message  # host:pid of the holder
    assert "--wait-for-lease" in message
    leases("another-job").acquire()  # other job names are independent


def test_waiting_takes_the_lease_when_the_holder_releases(
    leases: Callable[[str], JobLease],
) -> None:
    first = leases("orders")
    first.acquire()
    second = leases("orders")
    with pytest.raises(JobLeaseHeldError):
        second.acquire(wait=True, timeout=0.6)  # gives up after the timeout
    threading.Timer(0.5, first.release).start()
    started = time.monotonic()
    second.acquire(wait=True, timeout=20)
    assert time.monotonic() - started >= 0.4
    with pytest.raises(JobLeaseHeldError):
        leases("orders").acquire()


def test_a_holder_killed_with_sigkill_frees_the_lease(
    store_url: str, leases: Callable[[str], JobLease]
) -> None:
    holder = start_lease_holder(store_url, "clicks")
    try:
        with pytest.raises(JobLeaseHeldError, match=f":{holder.pid} since"):
            leases("clicks").acquire()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        # A file lock goes with the process. An ephemeral node outlives it until its
        # session expires, but a holder on this host whose process is gone is taken
        # over at once: a restart after a crash does not wait.
        leases("clicks").acquire()
    finally:
        if holder.poll() is None:
            holder.kill()
