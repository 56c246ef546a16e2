"""Compare-and-set of many checkpoints at once in a DynamoDB store (a round, or one save).

Each checkpoint is built from what is stored (``build(stored)``: a save ignores it, a
shard end keeps its position), carried past the operator's resets
(:class:`~kinesis_spout.checkpoint.resets.ResetFence`) and checked to be ahead
(:func:`~kinesis_spout.checkpoint.base.check_forward`), then written on the condition
that the item still has the version seen. What is "stored" starts as a guess: the
item this store last loaded or wrote (:class:`VersionCache`). A guess only ever
decides a write, never an answer: a failed condition returns the item found, which
replaces the guess, and a checkpoint the guess finds equal or behind is read again
before it is answered as a no-op or refused. So a round costs one write per shard
that moved and no read, unless another writer got there first.

Phases, up to :data:`CAS_ATTEMPTS`: decide every pending shard, send the writes
together (:meth:`~.dynamodb_items.CheckpointItems.put_many`), read again what must be
read; a shard that lost every attempt to concurrent writers is "unavailable".
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from kinesis_spout.checkpoint.base import check_forward
from kinesis_spout.checkpoint.dynamodb_items import Again, CheckpointItems, Stored, together
from kinesis_spout.checkpoint.dynamodb_lease import DynamoDbJobLease, LeaseItem
from kinesis_spout.checkpoint.dynamodb_table import ConditionFailed
from kinesis_spout.checkpoint.resets import ResetFence
from kinesis_spout.errors import (
    CheckpointError,
    CheckpointStoreUnavailableError,
    StaleCheckpointError,
)
from kinesis_spout.records import Checkpoint

CAS_ATTEMPTS = 20
"""Phases a round may take (the ZooKeeper store's compare-and-set attempts)."""

Build = Callable[[Checkpoint | None], Checkpoint]
"""What to write for a shard, given what is stored there."""
Key = tuple[str, str]


class VersionCache:
    """What this store last saw of each shard's item (thread-safe): the guess a write
    is conditioned on (the latest seen, whatever its version: a stream's items start
    again at version 1 once moved aside)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[Key, Stored] = {}

    def get(self, key: Key) -> Stored:
        with self._lock:
            return self._seen.get(key, Stored(None, 0))

    def put(self, key: Key, stored: Stored) -> None:
        with self._lock:
            self._seen[key] = stored

    def forget(self, stream: str) -> None:
        with self._lock:
            for key in [k for k in self._seen if k[0] == stream]:
                del self._seen[key]


@dataclass(slots=True)
class _Shard:
    """One checkpoint of the round and what is known of its item."""

    key: Key
    build: Build
    stored: Stored
    fresh: bool
    """``stored`` was read in this round (not a guess)."""


class Round:
    """One compare-and-set round over ``todo`` (``(stream, shard)`` and what to build);
    :meth:`run` gives each checkpoint's outcome."""

    def __init__(
        self,
        items: CheckpointItems,
        cache: VersionCache,
        resets: ResetFence,
        lease: DynamoDbJobLease | None,
        pool: Executor | None,
        todo: Sequence[tuple[Key, Build]],
    ) -> None:
        self.items = items
        self.cache = cache
        self.resets = resets
        self.lease = lease
        self.pool = pool
        self.shards = [_Shard(k, b, cache.get(k), False) for k, b in todo]
        self.out: dict[int, Checkpoint | CheckpointError] = {}
        self.no_ops: list[int] = []
        """Checkpoints answered with what is stored, nothing written."""

    def run(self) -> list[Checkpoint | CheckpointError]:
        """Each checkpoint's stored value or refusal, in order (see the module docstring);
        an error that is neither stale nor "unavailable" is raised."""
        for _ in range(CAS_ATTEMPTS):
            pending = [i for i in range(len(self.shards)) if i not in self.out]
            if not pending:
                break
            self._phase(pending)
        for i, shard in enumerate(self.shards):
            self.out.setdefault(
                i,
                CheckpointStoreUnavailableError(
                    f"checkpoint {'/'.join(shard.key)}: {CAS_ATTEMPTS} compare-and-set "
                    "attempts lost to concurrent writers"
                ),
            )
        self._check_no_ops()
        return [self.out[i] for i in range(len(self.shards))]

    def _phase(self, pending: list[int]) -> None:
        """Decide each pending checkpoint; write those ahead; read again the guesses."""
        writes: list[tuple[int, Checkpoint]] = []
        reread: list[int] = []
        keys: set[Key] = set()
        for i in pending:
            shard = self.shards[i]
            if shard.key in keys:
                continue  # the same shard twice: after the first one's write
            keys.add(shard.key)
            stored = shard.stored.checkpoint
            try:
                new = self.resets.carry(stored, shard.build(stored))
                ahead = check_forward(stored, new)
            except StaleCheckpointError as exc:
                if shard.fresh:
                    self.out[i] = exc
                else:
                    reread.append(i)
                continue
            if ahead:
                writes.append((i, new))
            elif shard.fresh:
                assert stored is not None
                self.out[i] = stored
                self.no_ops.append(i)
            else:
                reread.append(i)
        reread.extend(self._write(writes))
        self._reread(reread)

    def _write(self, writes: list[tuple[int, Checkpoint]]) -> list[int]:
        """Send ``writes`` together; what must be read again."""
        sent = [(cp, self.shards[i].stored) for i, cp in writes]
        reread: list[int] = []
        answers = self.items.put_many(sent, self.lease, self.pool)
        for (i, _), got in zip(writes, answers, strict=True):
            shard = self.shards[i]
            if isinstance(got, Stored):
                self._saw(shard.key, got)
                assert got.checkpoint is not None
                self.out[i] = got.checkpoint
            elif isinstance(got, ConditionFailed):
                if got.item is None:
                    reread.append(i)
                else:
                    self._saw(shard.key, self.items.decode(got.item, *shard.key))
            elif isinstance(got, Again):
                continue
            elif isinstance(got, StaleCheckpointError | CheckpointStoreUnavailableError):
                self.out[i] = got
            else:
                raise got
        return reread

    def _reread(self, reread: list[int]) -> None:
        reads = [functools.partial(self._read, self.shards[i].key) for i in reread]
        for i, got in zip(reread, together(self.pool, reads), strict=True):
            if isinstance(got, Stored):
                self._saw(self.shards[i].key, got)
            else:
                self.out[i] = got

    def _read(self, key: Key) -> Stored | CheckpointStoreUnavailableError:
        try:
            return self.items.read(*key)
        except CheckpointStoreUnavailableError as exc:
            return exc

    def _saw(self, key: Key, stored: Stored) -> None:
        """``stored`` is the item of ``key`` now: for every checkpoint of it in the round."""
        self.cache.put(key, stored)
        for shard in self.shards:
            if shard.key == key:
                shard.stored, shard.fresh = stored, True

    def _check_no_ops(self) -> None:
        """Under a lease, a no-op (nothing written) still tells a holder cut off that it
        is: one read of the lease item for the round."""
        lease = self.lease
        if lease is None or not self.no_ops:
            return
        try:
            item = LeaseItem.read(lease.table, lease.keys)
        except CheckpointStoreUnavailableError as exc:
            for i in self.no_ops:
                self.out[i] = exc
            return
        if lease.lost or item is None or item.owner != lease.owner:
            what = f"checkpoint of {len(self.no_ops)} shard(s) of job {lease.job_name!r}"
            for i in self.no_ops:
                self.out[i] = lease.refused(what)
