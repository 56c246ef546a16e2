"""Hole 11: children of a shard that ended without ChildShards are found at once.

Some emulators and older API paths end a shard's last GetRecords answer without
``ChildShards``; the children then used to wait for the next periodic shard
refresh (``shard_refresh_interval``, 30 s by default).  Listing the shards as soon
as a shard ends finds them without waiting.
"""

from __future__ import annotations

from test_spout import Rig, S, data


def test_children_are_listed_as_soon_as_a_parent_ends_without_child_shards() -> None:
    r = Rig(shards=1, shard_refresh_interval=1000.0)
    r.kinesis.child_shards_in_answers = False
    r.kinesis.put_many(S[0], 2, prefix="p")
    r.open()
    start = r.clock()
    r.kinesis.split(S[0], (S[1],))  # after open: only a ListShards can reveal the child
    r.kinesis.put(S[1], b"child")
    got = []
    for _ in range(40):  # ten seconds of fake time, far below the refresh interval
        batch = r.spout.next_batch(10)
        r.spout.ack_many(batch)
        got.extend(batch)
        if b"child" in data(got):
            break
        r.clock.advance(0.25)
    assert data(got) == [b"p0", b"p1", b"child"]
    assert r.clock() - start <= 10.0
