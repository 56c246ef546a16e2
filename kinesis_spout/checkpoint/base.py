"""The checkpoint-store protocol, the monotonicity rule and the in-memory store."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from kinesis_spout.checkpoint.resets import ResetFence, reset_value
from kinesis_spout.errors import (
    CheckpointError,
    CheckpointStoreUnavailableError,
    StaleCheckpointError,
)
from kinesis_spout.records import Checkpoint


@runtime_checkable
class CheckpointStore(Protocol):
    """Where per-shard checkpoints of one job live.

    A store is bound to one job name at construction; ``load`` and ``save``
    work on one stream at a time.
    """

    job_name: str

    def load(self, stream_name: str) -> dict[str, Checkpoint]:
        """Every stored checkpoint of ``stream_name``, by shard id."""
        ...

    def save(self, checkpoint: Checkpoint) -> Checkpoint:
        """Store ``checkpoint`` if it is after the stored one; return what is
        stored now. Equal: no-op. Behind, or refused because another owner
        holds the shard: :class:`StaleCheckpointError`."""
        ...

    def save_many(self, checkpoints: Sequence[Checkpoint]) -> list[Checkpoint | CheckpointError]:
        """``save`` of each checkpoint (any shards), in one write where the store can (the
        file store: one read and one write of a stream's file for all of them, not one
        each). Per checkpoint, in order: what is stored now, or the
        :class:`StaleCheckpointError` or
        :class:`~kinesis_spout.errors.CheckpointStoreUnavailableError` that ``save`` would
        have raised for it."""
        ...

    def mark_ended(self, stream_name: str, shard_id: str, owner: str) -> Checkpoint:
        """Record that every record of a closed shard is done."""
        ...

    def reset(self, stream_name: str, shard_id: str, checkpoint: Checkpoint) -> Checkpoint:
        """The operator's override (``kinesis-spout checkpoints reset``, with the job
        stopped): store ``checkpoint`` whatever is stored, backwards too, and count the
        reset; a reader that loaded the shard before it can no longer save it
        (:mod:`~kinesis_spout.checkpoint.resets`). Never called by readers."""
        ...

    def claim_stream(self, stream_name: str, identity: str) -> str | None:
        """Record ``identity`` (the stream's creation time) as the identity of
        ``stream_name``'s checkpoints. The first claim keeps what is stored (a store written
        before identities were kept: the same stream, as older jobs read it). A claim with
        another identity than the stored one is a stream deleted and created again under
        its name: the stored checkpoints are moved aside (kept, never resumed) and the old
        identity is returned. None: nothing moved."""
        ...

    def close(self) -> None:
        """Release connections; further calls are an error."""
        ...


def save_each(
    save: Callable[[Checkpoint], Checkpoint], checkpoints: Iterable[Checkpoint]
) -> list[Checkpoint | CheckpointError]:
    """:meth:`CheckpointStore.save_many` of a store that writes each checkpoint on its own:
    ``save`` of each, its stale or unavailable error kept in its place."""
    out: list[Checkpoint | CheckpointError] = []
    for cp in checkpoints:
        try:
            out.append(save(cp))
        except (StaleCheckpointError, CheckpointStoreUnavailableError) as exc:
            out.append(exc)
    return out


def check_forward(stored: Checkpoint | None, new: Checkpoint) -> bool:
    """Shared monotonicity rule: True = write ``new``; False = equal (no-op);
    raises :class:`StaleCheckpointError` when ``new`` is behind ``stored``."""
    if stored is None:
        return True
    if new.is_after(stored):
        return True
    if stored.is_after(new):
        raise StaleCheckpointError(
            f"refusing to move checkpoint of {new.stream_name}/{new.shard_id} backwards: "
            f"stored {stored.sequence_number}:{stored.sub_sequence_number}"
            f"{' (shard end)' if stored.shard_end else ''}, "
            f"new {new.sequence_number}:{new.sub_sequence_number}"
        )
    return False


class MemoryCheckpointStore:
    """A store that lives in this process only (tests, embedding)."""

    def __init__(self, job_name: str = "kinesis-spout", *, owner: str = "") -> None:
        self.job_name = job_name
        self.owner = owner
        self._data: dict[tuple[str, str], Checkpoint] = {}
        self._lock = threading.Lock()
        self.writes = 0
        self.closed = False
        self._fence = ResetFence()
        self._identities: dict[str, str] = {}
        self.retired: dict[tuple[str, str, str], Checkpoint] = {}
        """Checkpoints of streams recreated since, by (stream, its old identity, shard)."""

    def load(self, stream_name: str) -> dict[str, Checkpoint]:
        self._check_open()
        with self._lock:
            out = {s: c for (st, s), c in self._data.items() if st == stream_name}
            self._fence.loaded(stream_name, out)
            return out

    def save(self, checkpoint: Checkpoint) -> Checkpoint:
        self._check_open()
        cp = replace(
            checkpoint,
            job_name=self.job_name,
            owner=checkpoint.owner or self.owner,
            updated_at=datetime.now(UTC),
        )
        with self._lock:
            k = (cp.stream_name, cp.shard_id)
            cp = self._fence.carry(self._data.get(k), cp)
            if check_forward(self._data.get(k), cp):
                self._data[k] = cp
                self.writes += 1
            return self._data[k]

    def save_many(self, checkpoints: Sequence[Checkpoint]) -> list[Checkpoint | CheckpointError]:
        return save_each(self.save, checkpoints)

    def mark_ended(self, stream_name: str, shard_id: str, owner: str) -> Checkpoint:
        self._check_open()
        with self._lock:
            prev = self._data.get((stream_name, shard_id))
        if prev is not None and prev.shard_end:
            return prev
        seq = prev.sequence_number if prev else None
        sub = prev.sub_sequence_number if prev else 0
        return self.save(Checkpoint(stream_name, shard_id, seq, sub, shard_end=True, owner=owner))

    def reset(self, stream_name: str, shard_id: str, checkpoint: Checkpoint) -> Checkpoint:
        self._check_open()
        with self._lock:
            k = (stream_name, shard_id)
            cp = reset_value(
                self._data.get(k), checkpoint, self.job_name, self.owner, datetime.now(UTC)
            )
            self._data[k] = cp
            self.writes += 1
            return cp

    def claim_stream(self, stream_name: str, identity: str) -> str | None:
        self._check_open()
        with self._lock:
            old = self._identities.get(stream_name)
            self._identities[stream_name] = identity
            if old is None or old == identity:
                return None
            for k in [k for k in self._data if k[0] == stream_name]:
                self.retired[(stream_name, old, k[1])] = self._data.pop(k)
            return old

    def close(self) -> None:
        self.closed = True

    def _check_open(self) -> None:
        if self.closed:
            raise CheckpointError(f"memory checkpoint store of job {self.job_name!r} is closed")
