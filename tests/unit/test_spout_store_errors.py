"""Hole 2: a checkpoint-store error while a parent shard ends never drops a page.

The parent's last GetRecords answer names its children; adopting them reads the
store.  That read used to happen inside the getter's callback, and a store error
there lost the page being delivered (the getter had already moved past it): the
parent never drained and its children never started.  Store errors are now
retried with backoff, logged and counted, and the page is handed out.
"""

from __future__ import annotations

from typing import Any

from test_spout import Rig, S, data

from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.errors import CheckpointStoreUnavailableError
from kinesis_spout.records import Checkpoint, ShardState


class FlakyStore(MemoryCheckpointStore):
    """A memory store that can be made unreachable."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.down = False
        self.refused = 0

    def _fail(self) -> None:
        if self.down:
            self.refused += 1
            raise CheckpointStoreUnavailableError("ZooKeeper is away (test)")

    def load(self, stream_name: str) -> dict[str, Checkpoint]:
        self._fail()
        return super().load(stream_name)

    def save(self, checkpoint: Checkpoint) -> Checkpoint:
        self._fail()
        return super().save(checkpoint)

    def mark_ended(self, stream_name: str, shard_id: str, owner: str) -> Checkpoint:
        self._fail()
        return super().mark_ended(stream_name, shard_id, owner)


def flaky_rig() -> tuple[Rig, FlakyStore]:
    r = Rig(shards=1, checkpoint_interval=1.0)
    store = FlakyStore("j")
    r.store = store
    r.spout._store = store  # noqa: SLF001  (the rig built the spout with its own store)
    return r, store


def test_a_store_error_while_the_parent_ends_loses_no_page_and_children_start() -> None:
    r, store = flaky_rig()
    r.kinesis.put_many(S[0], 3, prefix="p")
    r.open()
    r.kinesis.split(S[0], (S[1],))  # found only through the parent's last answer
    r.kinesis.put(S[1], b"child")
    store.down = True
    got = []
    for _ in range(20):
        try:
            batch = r.spout.next_batch(10)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"a store error escaped next_batch: {exc!r}") from exc
        r.spout.ack_many(batch)
        got.extend(batch)
        r.clock.advance(0.5)
    assert data(got) == [b"p0", b"p1", b"p2"]  # the parent's last page was handed out
    assert store.refused > 0
    assert r.spout.shard_states()[S[0]] is ShardState.DRAINING
    assert r.metrics.count("checkpoint_store_errors") > 0
    store.down = False
    for _ in range(80):
        batch = r.spout.next_batch(10)
        r.spout.ack_many(batch)
        got.extend(batch)
        if b"child" in data(got):
            break
        r.clock.advance(0.5)
    assert data(got) == [b"p0", b"p1", b"p2", b"child"]
    assert r.spout.shard_states()[S[0]] is ShardState.ENDED
    cp = r.cp(S[0])
    assert cp is not None and cp.shard_end
