"""Every reader of a job takes the job lease, not only ``kinesis-spout run`` (issue 26,
hole 2): a second ``KinesisSpout`` of the same job name and checkpoint store fails
naming the holder, ``status`` says who is reading, and the lease is free again once
the first closes. File, ZooKeeper and DynamoDB stores, on the moto server."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kit import spout_config

from kinesis_spout.checkpoint.joblease import JobLeaseHeldError
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.status.command import gather
from kinesis_spout.status.model import LeaseState
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.mark.parametrize("kind", ["file", "zk", "dynamodb"])
def test_a_second_spout_of_the_same_job_is_refused_naming_the_first(
    moto_server: MotoServer,
    store_url_of: Callable[[str], str],
    unique_name: str,
    tmp_path: Path,
    kind: str,
) -> None:
    create_stream(emulator_client(moto_server.endpoint_url), unique_name, 2)
    cfg = spout_config(
        under=tmp_path,
        stream_name=unique_name,
        job_name="billing",
        endpoint_url=moto_server.endpoint_url,
        checkpoint_store=store_url_of(kind),
    )
    me = f"{socket.gethostname()}:{os.getpid()}"
    with KinesisSpout(cfg) as first:
        first.next_batch(10)
        second = KinesisSpout(cfg)
        with pytest.raises(JobLeaseHeldError) as err:
            second.open()
        assert "job 'billing' is already running" in str(err.value)
        assert f"held by {me} (KinesisSpout" in str(err.value)
        report = gather(cfg, lag=False)
        assert report.job_lease.state is LeaseState.HELD
        assert report.job_lease.holder is not None
        assert report.job_lease.holder.startswith(f"{me} (KinesisSpout")
    assert gather(cfg, lag=False).job_lease.state is LeaseState.FREE
    with KinesisSpout(cfg) as again:  # the first one let it go on close
        assert again.next_batch(10) == []


def test_wait_for_lease_takes_over_when_the_holder_closes(
    moto_server: MotoServer, unique_name: str, tmp_path: Path
) -> None:
    create_stream(emulator_client(moto_server.endpoint_url), unique_name, 1)
    cfg = spout_config(
        under=tmp_path,
        stream_name=unique_name,
        job_name="billing",
        endpoint_url=moto_server.endpoint_url,
    )
    opened = threading.Event()
    first = KinesisSpout(cfg)
    first.open()
    second = KinesisSpout(cfg.replace(wait_for_lease=True))

    def open_second() -> None:
        second.open()
        opened.set()

    t = threading.Thread(target=open_second, daemon=True)
    t.start()
    assert not opened.wait(1.0)  # waits while the first holds the lease
    first.close()
    assert opened.wait(30.0)
    t.join(5.0)
    second.close()


def test_shard_lease_readers_opt_out_and_the_default_is_safe(
    moto_server: MotoServer, unique_name: str, tmp_path: Path
) -> None:
    """``job_lease=False`` is for readers fenced otherwise (the coordination worker's
    shard leases, the Spark job's driver that holds the job lease itself)."""
    create_stream(emulator_client(moto_server.endpoint_url), unique_name, 1)
    cfg = spout_config(
        under=tmp_path,
        stream_name=unique_name,
        job_name="billing",
        endpoint_url=moto_server.endpoint_url,
    )
    with KinesisSpout(cfg, job_lease=False), KinesisSpout(cfg, job_lease=False):
        started = time.monotonic()
        with pytest.raises(JobLeaseHeldError), KinesisSpout(cfg), KinesisSpout(cfg):
            pass
        assert time.monotonic() - started < 10
