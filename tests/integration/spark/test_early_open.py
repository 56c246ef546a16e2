"""The stream opened while the Spark session starts (``spark/launch/early.py``), on moto.

No Spark: the reader is opened as the job's start-up thread opens it, then planned and
read in-process as the micro-batch loop would (plans, read tasks, results applied).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from read_helpers import run_tasks

from kinesis_spout.config import SpoutConfig
from kinesis_spout.spark.launch.early import EarlyReader
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, put_records

pytestmark = pytest.mark.integration


def config(endpoint: str, stream: str, tmp_path: Path) -> SpoutConfig:
    return SpoutConfig(
        stream_name=stream,
        endpoint_url=endpoint,
        job_name="job",
        checkpoint_store=f"file://{tmp_path / 'checkpoints'}",
        dead_letter=str(tmp_path / "dead"),
        worker_id="w",
        empty_shard_backoff=0.05,
        message_timeout=0.0,
    )


def flat(tasks: list[list[str]]) -> list[str]:
    return [i for t in tasks for i in t]


def put(client: Any, stream: str, prefix: str, n: int) -> list[str]:
    items = [(f"{prefix}{i}", f"{prefix}{i}".encode()) for i in range(n)]
    put_records(client, stream, items)
    return [key for key, _ in items]


def test_a_stream_opened_early_plans_every_shard_at_an_iterator_opened_already(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 3)
    first = put(moto_client, unique_name, "a", 30)
    early = EarlyReader(config(moto_server.endpoint_url, unique_name, tmp_path), None)
    early.open()
    planners = early.planners
    assert planners is not None
    plans = planners.plan(10_000)
    assert len({p.shard_id for p in plans}) == 3
    assert all(p.position is not None and p.position.iterator for p in plans)
    # Read at those iterators, as the first micro-batch's tasks do: every record once.
    assert sorted(flat(run_tasks(planners, want=30))) == sorted(first)
    planners.spout.close()
    early.close()  # the loop took it and closed it: nothing more to close


def test_iterators_opened_early_start_right_after_the_checkpoints(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 3)
    first = put(moto_client, unique_name, "a", 30)
    cfg = config(moto_server.endpoint_url, unique_name, tmp_path)
    early = EarlyReader(cfg, None)
    early.open()
    assert early.planners is not None
    assert sorted(flat(run_tasks(early.planners, want=30))) == sorted(first)
    early.planners.spout.close()  # the final checkpoint, as the loop's end writes it
    later = put(moto_client, unique_name, "b", 30)
    again = EarlyReader(cfg, None)
    again.open()
    assert again.planners is not None
    plans = again.planners.plan(10_000)
    assert all(p.position is not None and p.position.iterator for p in plans)
    # Nothing read again, nothing lost.
    assert sorted(flat(run_tasks(again.planners, want=30))) == sorted(later)
    again.close()


def test_a_stream_that_cannot_open_early_is_left_to_the_loop_to_open(
    moto_server: MotoServer, unique_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    early = EarlyReader(config(moto_server.endpoint_url, unique_name, tmp_path), None)
    with caplog.at_level(logging.DEBUG, logger="kinesis_spout.spark.launch.early"):
        early.open()  # the stream does not exist: said, not raised
    assert early.planners is None
    assert unique_name in caplog.text and "did not open early" in caplog.text
    early.close()  # nothing opened, nothing to close
