"""The local-file checkpoint store (``file://DIR``), the embedded default.

One file per job and stream, ``DIR/<job>/<stream>.json``, beside ``<stream>.identity``
(the creation time of the stream those checkpoints are of; the checkpoints of a stream
since deleted and created again are kept as ``<stream>.json.retired-<its creation
time>``). A write is read-check-modify-write under an exclusive ``flock``, so two stores
on one directory still compare-and-set, and lands atomically (temporary file, ``fsync``,
``rename``, ``fsync`` of the directory): a crash leaves the old or the new file, never a
torn one. Safe for one worker; coordinated workers need ``zk://``. The format and
the steps: docs/checkpoints.md ("The file store").
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kinesis_spout.checkpoint.base import check_forward
from kinesis_spout.checkpoint.codec import checkpoint_from_json, checkpoint_to_json
from kinesis_spout.checkpoint.resets import ResetFence, reset_value
from kinesis_spout.durable import replace_synced
from kinesis_spout.errors import (
    CheckpointError,
    CheckpointStoreUnavailableError,
    ConfigError,
    CorruptCheckpointError,
    StaleCheckpointError,
)
from kinesis_spout.records import Checkpoint

log = logging.getLogger(__name__)

FILE_FORMAT = 1


def _now() -> datetime:
    return datetime.now(UTC)


class FileCheckpointStore:
    """Checkpoints of one job in JSON files under ``directory``.

    ``now`` stamps ``updated_at`` (injectable for tests).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        job_name: str,
        *,
        owner: str = "",
        now: Callable[[], datetime] = _now,
    ) -> None:
        if not job_name or "/" in job_name or job_name in (".", ".."):
            raise ConfigError("job_name", job_name, "a non-empty name without '/'")
        if not str(directory):
            raise ConfigError("checkpoint_store", "file://", "file://DIR with a directory")
        self.job_name = job_name
        self.owner = owner
        self.directory = Path(directory)
        self.job_dir = self.directory / job_name
        self._now = now
        self._closed = False
        self._fence = ResetFence()

    def __repr__(self) -> str:
        return f"FileCheckpointStore({str(self.directory)!r}, job={self.job_name!r})"

    # -- paths -------------------------------------------------------------------
    def path(self, stream_name: str) -> Path:
        """The file holding ``stream_name``'s checkpoints."""
        _check_name("stream_name", stream_name)
        return self.job_dir / f"{stream_name}.json"

    # -- the protocol ----------------------------------------------------------------
    def load(self, stream_name: str) -> dict[str, Checkpoint]:
        self._check_open()
        out = self._read(self.path(stream_name), stream_name)
        self._fence.loaded(stream_name, out)
        return out

    def save(self, checkpoint: Checkpoint) -> Checkpoint:
        out = self.save_many([checkpoint])[0]
        if isinstance(out, CheckpointError):
            raise out
        return out

    def save_many(self, checkpoints: Sequence[Checkpoint]) -> list[Checkpoint | CheckpointError]:
        """See :meth:`CheckpointStore.save_many`: per stream, one read and one write of its
        file under its lock, whatever the number of shards (a write each would rewrite
        the whole file once per shard: a checkpoint round of n shards would cost n**2)."""
        self._check_open()
        out: list[Checkpoint | CheckpointError] = []
        by_stream: dict[str, list[int]] = {}
        for i, checkpoint in enumerate(checkpoints):
            _check_name("shard_id", checkpoint.shard_id)
            by_stream.setdefault(checkpoint.stream_name, []).append(i)
            out.append(checkpoint)
        for stream_name, indexes in by_stream.items():
            try:
                self._save_stream(stream_name, indexes, out)
            except CheckpointStoreUnavailableError as exc:
                for i in indexes:
                    out[i] = exc
        return out

    def _save_stream(
        self, stream_name: str, indexes: list[int], out: list[Checkpoint | CheckpointError]
    ) -> None:
        """The checkpoints ``out[i]`` of one stream, in one write; each replaced in ``out``
        by what is stored now, or its stale error."""
        path = self.path(stream_name)
        now = self._now()
        written: list[Checkpoint] = []
        with self._locked(stream_name):
            current = self._read(path, stream_name)
            for i in indexes:
                given = out[i]
                assert isinstance(given, Checkpoint)
                cp = replace(
                    given, job_name=self.job_name, owner=given.owner or self.owner, updated_at=now
                )
                stored = current.get(cp.shard_id)
                try:
                    cp = self._fence.carry(stored, cp)
                    forward = check_forward(stored, cp)
                except StaleCheckpointError as exc:
                    out[i] = exc
                    continue
                if forward:
                    current[cp.shard_id] = cp
                    written.append(cp)
                out[i] = current[cp.shard_id]
            if written:
                self._write(path, stream_name, current)
        for cp in written:
            log.debug(
                "checkpoint %s/%s -> %s:%s%s",
                cp.stream_name,
                cp.shard_id,
                cp.sequence_number,
                cp.sub_sequence_number,
                " (shard end)" if cp.shard_end else "",
            )

    def mark_ended(self, stream_name: str, shard_id: str, owner: str) -> Checkpoint:
        self._check_open()
        # Not load(): that is a reader's start, which would adopt a reset it did not see.
        stored = self._read(self.path(stream_name), stream_name).get(shard_id)
        if stored is not None and stored.shard_end:
            return stored
        return self.save(
            Checkpoint(
                stream_name,
                shard_id,
                stored.sequence_number if stored else None,
                stored.sub_sequence_number if stored else 0,
                shard_end=True,
                owner=owner,
            )
        )

    def reset(self, stream_name: str, shard_id: str, checkpoint: Checkpoint) -> Checkpoint:
        """See :meth:`CheckpointStore.reset`: written under the same lock as ``save``."""
        self._check_open()
        _check_name("shard_id", shard_id)
        path = self.path(stream_name)
        with self._locked(stream_name):
            current = self._read(path, stream_name)
            cp = reset_value(
                current.get(shard_id), checkpoint, self.job_name, self.owner, self._now()
            )
            current[shard_id] = cp
            self._write(path, stream_name, current)
        log.info("checkpoint %s/%s reset (reset %d)", stream_name, shard_id, cp.resets)
        return cp

    def claim_stream(self, stream_name: str, identity: str) -> str | None:
        """See :meth:`CheckpointStore.claim_stream`: under the stream's lock."""
        self._check_open()
        path = self.path(stream_name)
        marker = self.job_dir / f"{stream_name}.identity"
        with self._locked(stream_name):
            try:
                old: str | None = marker.read_text(encoding="utf-8").strip() or None
            except FileNotFoundError:
                old = None
            except OSError as exc:
                raise CheckpointStoreUnavailableError(
                    f"cannot read {marker}: {exc.strerror}"
                ) from exc
            if old == identity:
                return None
            try:
                if old is not None and path.exists():
                    stamp = "".join(c if c.isalnum() else "-" for c in old)
                    path.rename(path.with_name(f"{path.name}.retired-{stamp}"))
                replace_synced(marker, identity.encode() + b"\n")
            except OSError as exc:
                raise CheckpointStoreUnavailableError(
                    f"cannot write {marker}: {exc.strerror}"
                ) from exc
        return old

    def close(self) -> None:
        self._closed = True

    # -- internals ------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointError(f"{self!r} is closed")

    @contextlib.contextmanager
    def _locked(self, stream_name: str) -> Iterator[None]:
        try:
            self.job_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.job_dir / f".{stream_name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise CheckpointStoreUnavailableError(
                f"cannot open checkpoint directory {self.job_dir}: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # also drops the lock

    def _read(self, path: Path, stream_name: str) -> dict[str, Checkpoint]:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise CheckpointStoreUnavailableError(
                f"cannot read checkpoint file {path}: {exc.strerror}"
            ) from exc
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptCheckpointError(
                f"checkpoint file {path} is not valid JSON ({exc}); fix or remove it "
                "(no silent restart from the initial position)"
            ) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("shards"), dict):
            raise CorruptCheckpointError(
                f"checkpoint file {path} is not a checkpoint file: expected an object with "
                "'format', 'job', 'stream' and 'shards'"
            )
        if doc.get("format") != FILE_FORMAT:
            raise CorruptCheckpointError(
                f"checkpoint file {path} has format {doc.get('format')!r}, "
                f"this version reads {FILE_FORMAT}"
            )
        for name, expected in (("job", self.job_name), ("stream", stream_name)):
            if doc.get(name) != expected:
                raise CorruptCheckpointError(
                    f"checkpoint file {path} belongs to {name} {doc.get(name)!r}, not {expected!r}"
                )
        shards: dict[str, Any] = doc["shards"]
        return {
            shard: checkpoint_from_json(
                obj,
                where=f"{path} [{shard}]",
                stream=stream_name,
                shard=shard,
                job=self.job_name,
            )
            for shard, obj in shards.items()
        }

    def _write(self, path: Path, stream_name: str, cps: dict[str, Checkpoint]) -> None:
        doc = {
            "format": FILE_FORMAT,
            "job": self.job_name,
            "stream": stream_name,
            "shards": {s: checkpoint_to_json(cps[s]) for s in sorted(cps)},
        }
        data = json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"
        try:
            replace_synced(path, data)
        except OSError as exc:
            raise CheckpointStoreUnavailableError(
                f"cannot write checkpoint file {path}: {exc.strerror}"
            ) from exc


def _check_name(field: str, value: str) -> None:
    if not value or "/" in value or "\0" in value:
        raise ConfigError(field, value, "a non-empty name without '/'")
