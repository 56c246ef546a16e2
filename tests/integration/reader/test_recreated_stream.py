"""A stream deleted and created again under its name, with two readers of one job sharing
the store (``job_lease = False``, as coordinated workers do), on the file store and a real
ZooKeeper, against the moto server.

* Two readers opening together: whichever claims the new stream's identity first, neither
  resumes the new stream's shards from the old stream's positions.
* A reader still holding the old stream lets it go without saving its old positions over
  the checkpoints of the new stream that another reader already reads.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kit import spout_config
from reader_helpers import PACE, fill, put, rid

from kinesis_spout.checkpoint import CheckpointStore, open_store
from kinesis_spout.config import SpoutConfig
from kinesis_spout.errors import StreamNotFoundError
from kinesis_spout.records import Checkpoint, Record
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.servers import MotoServer, ZooKeeperServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
SHARD = "shardId-000000000000"


@pytest.fixture(params=["file", "zk"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> str:
    if request.param == "file":
        return f"file://{tmp_path / 'cp'}"
    zookeeper: ZooKeeperServer = request.getfixturevalue("zookeeper")
    return zookeeper.url(f"/tests/{unique_name}")


def _config(
    moto: MotoServer, store_url: str, tmp_path: Path, stream: str, **kw: Any
) -> SpoutConfig:
    values: dict[str, Any] = {
        "streams": [stream],
        "endpoint_url": moto.endpoint_url,
        "checkpoint_store": store_url,
        "dead_letter": str(tmp_path / "dead"),
        **PACE,
    }
    return spout_config(**{**values, **kw})


def _read(spout: KinesisSpout, until: int, timeout: float) -> list[Record]:
    out: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(out) < until and time.monotonic() < deadline:
        batch = spout.next_batch(100)
        out += batch
        spout.ack_many(batch)
        if not batch:
            time.sleep(min(spout.poll_delay(), 0.05))
    return out


def _recreate(client: Any, name: str) -> None:
    client.delete_stream(StreamName=name)
    deadline = time.monotonic() + 30
    while True:
        try:
            client.describe_stream_summary(StreamName=name)
        except client.exceptions.ResourceNotFoundException:
            break
        assert time.monotonic() < deadline, f"{name} still there"
        time.sleep(0.1)
    time.sleep(0.01)  # a creation time after the old one's
    client.create_stream(StreamName=name, ShardCount=1)
    client.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2})


class FirstLoadHook:
    """A reader's store that runs ``then`` right after its first ``load`` returned: the
    moment another reader of the job may act between this reader's steps."""

    def __init__(self, inner: CheckpointStore, then: Callable[[], None]) -> None:
        self.inner = inner
        self.job_name = inner.job_name
        self._then: Callable[[], None] | None = then

    def load(self, stream_name: str) -> dict[str, Checkpoint]:
        out = self.inner.load(stream_name)
        then, self._then = self._then, None
        if then is not None:
            then()
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_two_readers_opening_on_a_recreated_stream_both_read_it_from_its_start(
    moto_server: MotoServer, moto_client: Any, store_url: str, unique_name: str, tmp_path: Path
) -> None:
    old = fill(moto_client, unique_name, 40, shards=1, prefix="old")
    cfg = _config(moto_server, store_url, tmp_path, unique_name)
    with KinesisSpout(cfg, job_lease=False) as first:
        assert sorted(rid(r.data) for r in _read(first, 40, 60)) == sorted(old)
    _recreate(moto_client, unique_name)
    new = put(moto_client, unique_name, 12, prefix="new")  # fewer: the old position is past

    other = KinesisSpout(cfg, job_lease=False)
    store = open_store(store_url, "job", owner="a")
    a = KinesisSpout(cfg, job_lease=False, store=FirstLoadHook(store, other.open))  # type: ignore[arg-type]
    try:
        a.open()  # the other reader opens (claims, moves the old aside) right after a's load
        got_a = _read(a, 12, 15)
        got_other = _read(other, 12, 15)
    finally:
        a.close()
        other.close()
        store.close()
    assert sorted(rid(r.data) for r in got_a) == sorted(new)
    assert sorted(rid(r.data) for r in got_other) == sorted(new)


def test_a_reader_letting_a_recreated_stream_go_saves_nothing_over_the_new_streams(
    moto_server: MotoServer, moto_client: Any, store_url: str, unique_name: str, tmp_path: Path
) -> None:
    """The old stream's reader has read and acked records it has not saved yet (a long
    checkpoint interval); another reader of the job already reads the new stream. When the
    old reader finds its stream recreated, its last positions must not land on the new
    stream's shards."""
    old = fill(moto_client, unique_name, 40, shards=1, prefix="old")
    slow = _config(
        moto_server, store_url, tmp_path, unique_name, checkpoint_interval=600.0,
        shard_refresh_interval=0.2,
    )  # fmt: skip
    fresh_cfg = _config(moto_server, store_url, tmp_path, unique_name, checkpoint_interval=600.0)
    observer = open_store(store_url, "job", owner="observer")
    try:
        with KinesisSpout(slow, job_lease=False) as stale:
            assert len(_read(stale, 40, 60)) == len(old)  # acked, not saved
            _recreate(moto_client, unique_name)
            new = put(moto_client, unique_name, 12, prefix="new")
            with KinesisSpout(fresh_cfg, job_lease=False) as fresh:
                got = _read(fresh, 12, 30)
                assert sorted(rid(r.data) for r in got) == sorted(new)
                deadline = time.monotonic() + 30
                while unique_name in stale.streams.sets:  # it finds its stream recreated
                    assert time.monotonic() < deadline, "the old stream is still read"
                    with contextlib.suppress(StreamNotFoundError):  # its only stream: gone
                        stale.next_batch(100)
                    time.sleep(0.05)
                stored = observer.load(unique_name).get(SHARD)
                assert stored is None, f"the old stream's position landed on the new: {stored}"
        final = observer.load(unique_name)[SHARD]
        assert final.sequence_number == got[-1].sequence_number  # the new reader's, saved
    finally:
        observer.close()
