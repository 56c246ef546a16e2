"""The default dead-letter sink, ``dead_letter`` a directory: JSON lines, one file per shard.

A record is given up only after ``retry_limit`` retries; it is written here
exactly once, and only then counts as done for the checkpoint. The sink
appends JSON lines to ``<dir>/<job>/<stream>/<shard>.jsonl`` and fsyncs
before returning, so a checkpoint written afterwards can never skip a record
that is not on disk. A record already in the file (replayed after a crash) is
not written again: each record is dead-lettered once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kinesis_spout.deadletter.base import DeadLetter, dead_letter_entry
from kinesis_spout.records import Record

# The logger the dead-letter module had before it became a package: log filters keep working.
log = logging.getLogger("kinesis_spout.deadletter")


def entry_ids(lines: Iterable[bytes], where: Path) -> tuple[set[str], bool]:
    """The message ids of the entries of a dead-letter file (``where``, for the log), and
    whether its last line was cut short by a crash. An entry is a complete line with a
    ``message_id``; a torn line is none, a malformed one is logged and skipped."""
    ids: set[str] = set()
    torn = False
    for line in lines:
        if not line.endswith(b"\n"):
            torn = True  # a write cut short by a crash: not an entry
            continue
        try:
            ids.add(str(json.loads(line)["message_id"]))
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring a malformed line in %s", where)
    return ids, torn


class JsonlDeadLetterSink:
    """Appends one JSON line per record, one file per shard, fsynced.

    Exactly one entry per record, across retries of a failed write and across
    restarts: the id joins the seen set only after the line is fsynced; a write
    that fails part-way is cut back to the file's previous size, and the file is
    scanned again before the next write (a line that did land is then found and
    not written twice). The files live under the job's name, so a restart of the
    same job on the same storage finds them; a ``file://`` dead-letter target must
    therefore be on storage that outlives the driver (see docs/guarantees.md).
    """

    def __init__(self, directory: str | Path, job_name: str) -> None:
        self.directory = Path(directory)
        self.job_name = job_name
        self._fds: dict[tuple[str, str], int] = {}
        self._seen: dict[tuple[str, str], set[str]] = {}
        self.written = 0

    def path_for(self, stream_name: str, shard_id: str) -> Path:
        return self.directory / self.job_name / stream_name / f"{shard_id}.jsonl"

    def _open(self, k: tuple[str, str]) -> int:
        """Open a shard's file for appending, remembering the ids already in it
        (a crash after a dead letter but before the next checkpoint replays the
        record: it must not be dead-lettered twice)."""
        p = self.path_for(*k)
        p.parent.mkdir(parents=True, exist_ok=True)
        seen: set[str] = set()
        torn = False
        if p.exists():
            with p.open("rb") as raw:
                seen, torn = entry_ids(raw, p)
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if torn:
            _write_all(fd, b"\n")
        os.fsync(fd)  # what was found is durable before it counts as written
        self._seen[k] = seen
        self._fds[k] = fd
        return fd

    def _forget(self, k: tuple[str, str]) -> None:
        """Drop a shard's open file and seen set: the next write scans the file again."""
        fd = self._fds.pop(k, None)
        self._seen.pop(k, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def write(
        self, record: Record, error: str | None, attempts: int, reason: str = "exhausted"
    ) -> None:
        self.write_many([DeadLetter(record, error, attempts, reason)])

    def write_many(self, letters: Sequence[DeadLetter]) -> None:
        """Append the letters not yet in their shard's file, then one fsync."""
        by_shard: dict[tuple[str, str], list[DeadLetter]] = {}
        for letter in letters:
            r = letter.record
            by_shard.setdefault((r.stream_name, r.shard_id), []).append(letter)
        for k, group in by_shard.items():
            self._write_shard(k, group)

    def _locked(self, k: tuple[str, str]) -> int:
        """The shard's file, open and exclusively locked, and the one now at its path
        (a re-drive's ``--delete`` replaces or removes it under the same lock)."""
        while True:
            fd = self._fds.get(k)
            if fd is None:
                fd = self._open(k)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if same_file(fd, self.path_for(*k)):
                return fd
            self._forget(k)  # closing drops the lock; open the new file, scan it again

    def _write_shard(self, k: tuple[str, str], letters: list[DeadLetter]) -> None:
        fd = self._locked(k)
        try:
            self._append(k, fd, letters)
        finally:
            if self._fds.get(k) == fd:  # a failed write closed it (and so unlocked it)
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _append(self, k: tuple[str, str], fd: int, letters: list[DeadLetter]) -> None:
        seen = self._seen[k]
        fresh: list[DeadLetter] = []
        chunks: list[bytes] = []
        for letter in letters:
            mid = letter.record.message_id
            if mid in seen or any(f.record.message_id == mid for f in fresh):
                log.info(
                    "%s/%s is already in the dead-letter file (replayed after a restart)",
                    letter.record.stream_name,
                    mid,
                )
                continue
            entry = dead_letter_entry(
                letter.record, letter.error, letter.attempts, self.job_name, letter.reason
            )
            chunks.append((json.dumps(entry, separators=(",", ":")) + "\n").encode("utf-8"))
            fresh.append(letter)
        if not fresh:
            return
        size = os.fstat(fd).st_size
        try:
            _write_all(fd, b"".join(chunks))
            os.fsync(fd)
        except BaseException:
            try:
                os.ftruncate(fd, size)  # never leave a fragment or an unconfirmed line
            except OSError:
                log.warning("could not cut %s back after a failed write", self.path_for(*k))
            self._forget(k)
            raise
        for letter in fresh:
            seen.add(letter.record.message_id)
            log.warning(
                "dead-lettered %s/%s (%s) after %d attempts: %s",
                letter.record.stream_name,
                letter.record.message_id,
                letter.reason,
                letter.attempts,
                letter.error,
            )
        self.written += len(fresh)

    def close(self) -> None:
        for k in list(self._fds):
            self._forget(k)


def same_file(fd: int, path: Path) -> bool:
    """``fd`` is open on the file now at ``path`` (not a replaced or removed one)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    was = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (was.st_dev, was.st_ino)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_dead_letters(directory: str | Path) -> list[dict[str, Any]]:
    """Every entry under a :class:`JsonlDeadLetterSink` directory (for audits)."""
    out: list[dict[str, Any]] = []
    for p in sorted(Path(directory).rglob("*.jsonl")):
        with p.open(encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    out.append(json.loads(line))
                except ValueError:  # a write cut short by a crash
                    log.warning("skipping a torn line in %s", p)
    return out
