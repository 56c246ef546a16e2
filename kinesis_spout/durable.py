"""Durable local files: what every file-backed store here writes the same way.

A file is written under a hidden temporary name in its own directory, synced,
renamed over the target (atomic on POSIX), and the directory synced, so after
a crash a reader sees the old content or the new one, never a fragment, and a
confirmed rename survives a power loss. Used by the checkpoint file store, the
streaming source's batch ends and the dead-letter re-drive.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path


def write_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (created or truncated) and sync it to disk."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def fsync_dir(directory: Path) -> None:
    """Sync a directory, so a rename, link or unlink in it is on disk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temporary_beside(path: Path) -> Path:
    """A hidden name, unique to this call, in ``path``'s directory."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")


def replace_synced(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably (see the module docstring).
    The temporary file is removed if anything fails."""
    tmp = temporary_beside(path)
    try:
        write_synced(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
