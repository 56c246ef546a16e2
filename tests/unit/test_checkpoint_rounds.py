"""A checkpoint round writes the file store's file once, whatever the shard count.

Each shard's save used to read and rewrite the whole file (``DIR/<job>/<stream>.json``)
under its lock, with two fsyncs: a round of n shards that moved cost n writes of an
n-entry file, n**2 in all (128 shards: 0.5 s of the driver per round, 1,000 shards:
many seconds). The reader now hands the round to the store in one ``save_many``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from test_spout import Rig

from kinesis_spout.checkpoint.file import FileCheckpointStore
from kinesis_spout.records import Checkpoint
from kinesis_spout.spout import KinesisSpout


class CountingFileStore(FileCheckpointStore):
    """The file store, counting the times it writes a stream's file."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.file_writes = 0

    def _write(self, path: Path, stream_name: str, cps: dict[str, Checkpoint]) -> None:
        self.file_writes += 1
        super()._write(path, stream_name, cps)


def file_rig(tmp_path: Path, shards: int) -> tuple[Rig, CountingFileStore]:
    rig = Rig(shards=shards, checkpoint_interval=5.0)
    store = CountingFileStore(tmp_path / "checkpoints", "j", owner="w1")
    rig.store = store  # type: ignore[assignment]
    rig.spout = KinesisSpout(
        rig.config,
        store=store,
        dead_letters=rig.sink,
        metrics=rig.metrics,
        clock=rig.clock,
        client=rig.kinesis,
        rng=random.Random(1),
    )
    return rig, store


def test_a_checkpoint_round_of_many_shards_writes_the_file_once(tmp_path: Path) -> None:
    rig, store = file_rig(tmp_path, 40)
    shard_ids = sorted(rig.kinesis.shards)
    for shard in shard_ids:
        rig.kinesis.put_many(shard, 3, prefix=shard[-3:])
    rig.open()
    assert len(rig.drain()) == 120
    before = store.file_writes
    rig.spout.checkpoint(force=True)

    assert store.file_writes == before + 1
    stored = FileCheckpointStore(tmp_path / "checkpoints", "j").load("s")
    last = {s: rig.kinesis.shards[s].records[-1]["SequenceNumber"] for s in shard_ids}
    assert {s: c.sequence_number for s, c in stored.items()} == last
    assert rig.metrics.count("checkpoint_writes") == 40

    rig.spout.checkpoint(force=True)  # nothing moved: nothing written
    assert store.file_writes == before + 1


def test_a_shard_refused_in_a_round_is_fenced_and_the_others_are_saved(tmp_path: Path) -> None:
    """Another owner moved one shard's checkpoint ahead: that shard is fenced (it stops
    emitting), the round's other shards are saved all the same."""
    rig, store = file_rig(tmp_path, 3)
    shard_ids = sorted(rig.kinesis.shards)
    for shard in shard_ids:
        rig.kinesis.put_many(shard, 2, prefix=shard[-3:])
    rig.open()
    assert len(rig.drain()) == 6
    other = FileCheckpointStore(tmp_path / "checkpoints", "j", owner="w2")
    ahead = str(10**30)
    other.save(Checkpoint("s", shard_ids[1], ahead))
    rig.spout.checkpoint(force=True)

    stored = FileCheckpointStore(tmp_path / "checkpoints", "j").load("s")
    assert stored[shard_ids[1]].sequence_number == ahead
    for shard in (shard_ids[0], shard_ids[2]):
        assert (
            stored[shard].sequence_number == rig.kinesis.shards[shard].records[-1]["SequenceNumber"]
        )
    parts = rig.spout.streams.sets["s"].shards
    assert [parts[s].fenced for s in shard_ids] == [False, True, False]
