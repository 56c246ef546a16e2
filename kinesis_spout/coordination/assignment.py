"""Which worker owns which shard: a pure function of the two sets.

Every worker computes the assignment itself from what it reads in ZooKeeper
(the live workers, the shards not yet ended), so the function must give the
same answer for the same sets in any order, on any machine: no randomness,
no ``hash()`` (salted per process), no clock.

:func:`assign_shards` is *balanced rendezvous hashing*. Each (worker, shard)
pair gets a stable score (BLAKE2b of the two names). Pairs are taken from the
highest score down, and a shard goes to the pair's worker if the worker still
has room: every worker gets ``len(shards) // len(workers)`` shards, and the
first ``len(shards) % len(workers)`` workers to fill up may take one more. So

* the split is as even as it can be (counts differ by at most one), and
* it is sticky: a shard's preferred workers do not depend on the other
  workers, so a worker joining or leaving moves few shards besides the ones
  it takes or gives up (round-robin over a sorted list would move most).

Worked example (the figures are what the function returns)::

    >>> a = assign_shards([f"shard-{i}" for i in range(6)], ["w1", "w2", "w3"])
    >>> for worker, shards in a.items():
    ...     print(worker, shards)
    w1 ('shard-3', 'shard-5')
    w2 ('shard-0', 'shard-2')
    w3 ('shard-1', 'shard-4')

    Worker w3 dies: its two shards are shared out, w1 and w2 keep theirs.

    >>> b = assign_shards([f"shard-{i}" for i in range(6)], ["w1", "w2"])
    >>> for worker, shards in b.items():
    ...     print(worker, shards)
    w1 ('shard-1', 'shard-3', 'shard-5')
    w2 ('shard-0', 'shard-2', 'shard-4')

    Back to w1, w2, w3, and a fourth worker w4 joins: it takes shard-2 from
    w2 and shard-1 from w3; w1 keeps both of its shards.

    >>> c = assign_shards([f"shard-{i}" for i in range(6)], ["w1", "w2", "w3", "w4"])
    >>> for worker, shards in c.items():
    ...     print(worker, shards)
    w1 ('shard-3', 'shard-5')
    w2 ('shard-0',)
    w3 ('shard-4',)
    w4 ('shard-1', 'shard-2')

**Several streams** (one worker group and one assignment per stream) balance each
stream alone, so the workers taking one more of a stream must also differ between
streams, or 2 streams of 1 shard each would both go to one of 2 workers. With a
``rotation`` (an int) the workers taking one more are fixed: those at positions
``rotation, rotation + 1, ...`` (cyclically) of the sorted workers.
:func:`stream_rotations` gives each stream, in the config's order, the rotation just
past the previous streams' extra shards, so over the streams every worker's count
differs from another's by at most one (when the streams have the same workers)::

    >>> splits = [(1, 2), (1, 2)]  # 2 streams: (live shards, workers) each
    >>> stream_rotations(splits)
    [0, 1]
    >>> assign_shards(["shard-0"], ["w1", "w2"], rotation=0)
    {'w1': ('shard-0',), 'w2': ()}
    >>> assign_shards(["shard-0"], ["w1", "w2"], rotation=1)
    {'w1': (), 'w2': ('shard-0',)}

A single stream is assigned without a rotation (the first workers to fill up take one
more), as it was before several streams could be read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["affinity", "assign_shards", "moved_shards", "stream_rotations"]


def affinity(worker: str, shard: str) -> int:
    """The stable score of a (worker, shard) pair: higher = preferred."""
    digest = hashlib.blake2b(f"{worker}\0{shard}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign_shards(
    shards: Iterable[str], workers: Iterable[str], rotation: int | None = None
) -> dict[str, tuple[str, ...]]:
    """Each worker's shards (sorted), for every worker; empty when there are no workers.

    ``rotation``: None, the first workers to fill up take one shard more than the
    others; an int, the workers at sorted positions from ``rotation`` on do (see the
    module docstring: one stream of several). Duplicates in either input are ignored;
    ties in score (astronomically rare) are broken by shard then worker name, so the
    result is total.
    """
    members = sorted(set(workers))
    items = sorted(set(shards))
    if not members:
        return {}
    quota, extra = divmod(len(items), len(members))
    fixed = _one_more(members, extra, rotation)
    pairs = sorted(
        ((affinity(w, s), s, w) for s in items for w in members),
        key=lambda p: (-p[0], p[1], p[2]),
    )
    owner: dict[str, str] = {}
    count = dict.fromkeys(members, 0)
    for _, shard, worker in pairs:
        if shard in owner:
            continue
        n = count[worker]
        if n < quota or (n == quota and extra > 0 and (fixed is None or worker in fixed)):
            if n == quota:
                extra -= 1
            owner[shard] = worker
            count[worker] = n + 1
            if len(owner) == len(items):
                break
    result: dict[str, list[str]] = {w: [] for w in members}
    for shard in items:
        result[owner[shard]].append(shard)
    return {w: tuple(s) for w, s in result.items()}


def _one_more(members: Sequence[str], extra: int, rotation: int | None) -> frozenset[str] | None:
    """The workers that take one shard more than the quota (None: the first to fill up)."""
    if rotation is None:
        return None
    return frozenset(members[(rotation + k) % len(members)] for k in range(extra))


def stream_rotations(splits: Iterable[tuple[int, int]]) -> list[int]:
    """Each stream's ``rotation`` for :func:`assign_shards`, from the ``(live shards,
    workers)`` of every stream in the config's order: the previous streams' extra shards
    (shards beyond an even split) summed, so each stream's extras start where the last
    one's ended. Every worker of the streams must list them in the same order."""
    out: list[int] = []
    at = 0
    for shards, workers in splits:
        out.append(at)
        at += shards % workers if workers > 0 else 0
    return out


def moved_shards(
    before: Mapping[str, Iterable[str]], after: Mapping[str, Iterable[str]]
) -> set[str]:
    """Shards whose owner differs between two assignments (present in both)."""
    old = {s: w for w, ss in before.items() for s in ss}
    new = {s: w for w, ss in after.items() for s in ss}
    return {s for s in old.keys() & new.keys() if old[s] != new[s]}
