"""Pieces of the streaming source's batch planning: pure, no I/O.

* :class:`SourceOffset`: every shard's position after a committed batch, which
  :class:`~kinesis_spout.streaming.store_mirror.StoreMirror` writes to the
  checkpoint store;
* :func:`split_streams`: how many records each stream may add to one batch, and
  :func:`split_quota`: how many each of a stream's shards may.

The offsets Spark stores are :class:`~kinesis_spout.streaming.batch_offset.BatchOffset`
(version 2; several streams: ``StreamsOffset``, version 3), with positions
:class:`~kinesis_spout.records.ShardPosition`; an offset of version 1 (the read-ahead
source of earlier releases) is refused there with an error naming its version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kinesis_spout.records import ShardPosition, StartPosition


@dataclass(frozen=True, slots=True)
class SourceOffset:
    """Every shard's position after one batch (``start``: where a shard with none starts)."""

    stream_name: str
    start: StartPosition
    shards: Mapping[str, ShardPosition] = field(default_factory=dict)


def split_quota(
    shard_ids: Sequence[str], per_shard: int, total: int | None, rotate: int = 0
) -> dict[str, int]:
    """Records each shard may add to one batch.

    Each gets ``per_shard`` at most; with a ``total`` (a ``ReadMaxRows``
    limit) it is shared evenly, the remainder going to the first shards after
    rotating the order by ``rotate`` (so no shard starves when ``total`` is
    smaller than the number of shards). Shards with a quota of 0 are left out.

    >>> split_quota(["a", "b", "c"], 100, 7)
    {'a': 3, 'b': 2, 'c': 2}
    """
    if per_shard < 1:
        raise ValueError("per_shard must be >= 1")
    ids = list(shard_ids)
    if total is None:
        return dict.fromkeys(ids, per_shard)
    if not ids:
        return {}
    k = rotate % len(ids)
    order = ids[k:] + ids[:k]
    base, extra = divmod(max(total, 0), len(ids))
    quotas = {s: min(per_shard, base + (1 if i < extra else 0)) for i, s in enumerate(order)}
    return {s: quotas[s] for s in ids if quotas[s] > 0}


def split_streams(
    capacity: Mapping[str, int], total: int | None, rotate: int = 0
) -> dict[str, int | None]:
    """Records each stream may add to one batch, of ``total`` (None: no limit, each
    stream's shards take ``maxRecordsPerShard`` each).

    ``capacity`` is what a stream can take now (its shards that may read, times
    ``maxRecordsPerShard``). Each stream is offered an equal share first, the remainder
    going to the first streams after rotating the order by ``rotate``; what a stream
    cannot take is shared again among the others, until ``total`` is given out or every
    stream is full. So a stream of one shard gets as much as one of a hundred (its
    shards then share its part: :func:`split_quota`), and a resting stream's part goes
    to the streams that can read.

    >>> split_streams({"a": 100, "b": 100, "c": 2}, 10)
    {'a': 5, 'b': 3, 'c': 2}
    """
    if total is None:
        return dict.fromkeys(capacity)
    shares = dict.fromkeys(capacity, 0)
    names = list(capacity)
    k = rotate % len(names) if names else 0
    room = [s for s in names[k:] + names[:k] if capacity[s] > 0]
    left = max(total, 0)
    while left > 0 and room:
        base, extra = divmod(left, len(room))
        for i, s in enumerate(room):
            give = min(capacity[s] - shares[s], base + (1 if i < extra else 0))
            shares[s] += give
            left -= give
        room = [s for s in room if shares[s] < capacity[s]]
    return dict(shares)
