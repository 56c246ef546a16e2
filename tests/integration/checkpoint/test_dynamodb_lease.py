"""The DynamoDB job lease on moto's server: renewed by its heartbeat, taken over once it
expires, and a holder cut off past its expiry has its checkpoint writes refused (the
fencing of a ZooKeeper store by its lease, with an expiry instead of a session)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from kinesis_spout.checkpoint import open_store
from kinesis_spout.checkpoint.dynamodb_lease import DynamoDbJobLease, LeaseItem
from kinesis_spout.checkpoint.joblease import JobLeaseHeldError, open_job_lease
from kinesis_spout.errors import StaleCheckpointError
from kinesis_spout.records import Checkpoint

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SHARD = "shardId-000000000000"

HOLDER = """
import sys
import threading
from kinesis_spout.checkpoint import open_store
from kinesis_spout.checkpoint.joblease import open_job_lease
from kinesis_spout.errors import StaleCheckpointError
from kinesis_spout.records import Checkpoint

url, job = sys.argv[1], sys.argv[2]
said = threading.Lock()


def say(line):  # one write per line: the heartbeat thread says "lost" beside the main one
    with said:
        sys.stdout.write(line + "\\n")
        sys.stdout.flush()


lease = open_job_lease(url, job, reader="holder")
lease.on_lost = lambda: say("lost")
lease.acquire()
store = open_store(url, job, owner="holder")
store.save(Checkpoint("orders", "shardId-000000000000", "10"))
say("held")
for line in sys.stdin:
    seq = line.strip()
    try:
        store.save(Checkpoint("orders", "shardId-000000000000", seq))
        say(f"saved {seq}")
    except StaleCheckpointError as exc:
        say(f"refused {exc}")
"""


class Holder:
    """The holder process: lines it printed, and a way to ask it to write."""

    def __init__(self, url: str, job: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, url, job],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.said: list[str] = []
        self._new = threading.Condition()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._new:
                self.said.append(line.strip())
                self._new.notify_all()

    def wait_for(self, prefix: str, timeout: float = 30.0) -> str:
        """The first line it said that starts with ``prefix`` (waited for, with a deadline)."""
        deadline = time.monotonic() + timeout
        with self._new:
            while True:
                found = [line for line in self.said if line.startswith(prefix)]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the holder never said {prefix!r}: {self.said}")
                self._new.wait(left)

    def write(self, seq: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(seq + "\n")
        self.proc.stdin.flush()


@pytest.fixture
def holder(dynamodb: str, unique_name: str) -> Iterator[Holder]:
    one = Holder(f"dynamodb://{unique_name}?lease_seconds=2", "billing")
    yield one
    if one.proc.poll() is None:
        os.kill(one.proc.pid, signal.SIGCONT)
        one.proc.kill()
        one.proc.wait()


def test_a_holder_paused_past_its_expiry_is_taken_over_and_its_later_write_refused(
    holder: Holder, unique_name: str
) -> None:
    url = f"dynamodb://{unique_name}?lease_seconds=2"
    holder.wait_for("held")
    os.kill(holder.proc.pid, signal.SIGSTOP)  # cut off: no heartbeat, no write
    second = open_job_lease(url, "billing", reader="second")
    try:
        second.acquire(wait=True, timeout=30)  # taken once the paused holder's lease expired
        store = open_store(url, "billing", owner="second")
        assert store.load("orders")[SHARD].sequence_number == "10"
        store.save(Checkpoint("orders", SHARD, "20"))

        os.kill(holder.proc.pid, signal.SIGCONT)
        holder.write("30")  # ahead of everything: only the lease can refuse it
        refused = holder.wait_for("refused")
        assert "no longer this process's (expired or taken over)" in refused, refused
        holder.wait_for("lost")
        assert store.load("orders")[SHARD].sequence_number == "20"
        store.save(Checkpoint("orders", SHARD, "25"))  # the new holder goes on
        store.close()
    finally:
        second.release()


def test_past_its_expiry_a_holder_is_refused_even_before_anyone_takes_over(
    dynamodb: str, unique_name: str
) -> None:
    """The lease item's condition uses this process's clock: a holder whose expiry passed
    (its clock moved on, as after a pause) is refused by DynamoDB itself."""
    url = f"dynamodb://{unique_name}?lease_seconds=60"
    wall = [time.time()]
    lease = DynamoDbJobLease.open(url, "billing")
    lease._wall = lambda: wall[0]  # the heartbeat waits 20 s: it never runs here
    lease.acquire()
    store = open_store(url, "billing")
    try:
        store.save(Checkpoint("orders", SHARD, "10"))
        wall[0] += 61  # past the expiry it wrote; the monotonic clock has not moved
        assert not lease.lost
        with pytest.raises(StaleCheckpointError, match="expired or taken over"):
            store.save(Checkpoint("orders", SHARD, "11"))
        assert open_store(url, "billing").load("orders")[SHARD].sequence_number == "10"
    finally:
        store.close()
        lease.release()


def test_the_heartbeat_renews_the_lease_past_its_length(dynamodb: str, unique_name: str) -> None:
    url = f"dynamodb://{unique_name}?lease_seconds=1.5"
    lease = open_job_lease(url, "billing")
    lease.acquire()
    try:
        assert isinstance(lease, DynamoDbJobLease)
        first = LeaseItem.read(lease.table, lease.keys)
        assert first is not None and first.counter == 1
        deadline = time.monotonic() + 30
        while True:  # three renewals: 1.5 s of lease lasted three times over
            item = LeaseItem.read(lease.table, lease.keys)
            assert item is not None and item.owner == lease.owner
            if item.counter >= 4:
                break
            assert time.monotonic() < deadline, f"not renewed: {item}"
            time.sleep(0.1)
        assert not lease.lost
        with pytest.raises(JobLeaseHeldError, match="job 'billing' is already running"):
            open_job_lease(url, "billing").acquire()
    finally:
        lease.release()
    assert LeaseItem.read(lease.table, lease.keys) is None  # released: the item is gone
