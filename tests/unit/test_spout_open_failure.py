"""An open() that fails after the spout opened its own store closes that store.

A corrupt checkpoint (or any error) met while opening used to leave the store
the spout had opened, and its ZooKeeper client, running: the job's process (or
an application embedding the spout) kept a client reconnecting to ZooKeeper.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_spout import Rig, S

from kinesis_spout import spout as spout_module
from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.errors import CorruptCheckpointError
from kinesis_spout.records import Checkpoint
from kinesis_spout.spout import KinesisSpout


class CorruptStore(MemoryCheckpointStore):
    def load(self, stream_name: str) -> dict[str, Checkpoint]:
        raise CorruptCheckpointError("checkpoint at /x/y is not valid JSON (test)")


def test_a_failed_open_closes_the_store_and_sink_it_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    r = Rig(shards=1)
    r.kinesis.put(S[0], b"x")
    opened: list[CorruptStore] = []

    def open_config_store(*a: Any, **kw: Any) -> CorruptStore:
        opened.append(CorruptStore("j"))
        return opened[-1]

    monkeypatch.setattr(spout_module, "open_config_store", open_config_store)
    sp = KinesisSpout(r.config, client=r.kinesis, clock=r.clock)  # opens its own store
    with pytest.raises(CorruptCheckpointError):
        sp.open()
    assert len(opened) == 1 and opened[0].closed


def test_a_store_given_by_the_caller_stays_open() -> None:
    r = Rig(shards=1)
    store = CorruptStore("j")
    sp = KinesisSpout(r.config, store=store, client=r.kinesis, clock=r.clock)
    with pytest.raises(CorruptCheckpointError):
        sp.open()
    assert not store.closed
