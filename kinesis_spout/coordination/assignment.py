"""Which worker owns which shard: a pure function of the two sets.

Every worker computes the assignment itself from what it reads in ZooKeeper (the live
workers, the shards not yet ended), so the function gives the same answer for the same
sets in any order, on any machine: no randomness, no ``hash()`` (salted per process), no
clock. :func:`assign_shards` is *balanced rendezvous hashing*: each (worker, shard) pair
gets a stable BLAKE2b score, and pairs are taken from the highest score down within
quotas, so counts differ by at most one and a worker joining or leaving moves few shards
besides its own. With several streams, :func:`stream_rotations` spreads each stream's
extra shards past the previous streams'. The worked examples: docs/checkpoints.md ("Who
owns what", "Several streams"), checked by the unit tests.
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
