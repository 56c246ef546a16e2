"""Removing re-driven entries from the dead-letter target without losing any other,
whatever writes beside it (``dead-letters redrive --delete``).

Only entries whose ids were re-driven are removed, from what the target holds at removal
time. A shard's file is rewritten to a new file and renamed over the old one under the
same exclusive ``flock`` the writers take
(:class:`~kinesis_spout.deadletter.jsonl.JsonlDeadLetterSink`), which re-open the new file;
lines that are not entries are kept. S3 objects are never overwritten: one with entries
left has those written to a new key (``<name>-kept-<random>.jsonl``) before it is
deleted, so a later write of the old key clobbers nothing. docs/operations.md ("Dead
letters: list and re-drive").
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from pathlib import Path
from typing import Any

from kinesis_spout.deadletter.jsonl import same_file
from kinesis_spout.durable import fsync_dir, replace_synced


def _entry_id(line: bytes) -> str | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return str(obj.get("message_id")) if isinstance(obj, dict) else None


def remove_from_file(path: Path, ids: set[str]) -> tuple[int, bool]:
    """Remove the entries with ``ids`` from ``path`` (see the module docstring):
    (how many were removed, whether the file was emptied and deleted)."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return 0, False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if not same_file(fd, path):
                continue  # another re-drive replaced it: lock the new one
            return _rewrite(fd, path, ids)
        finally:
            os.close(fd)  # drops the lock, after the rename


def _rewrite(fd: int, path: Path, ids: set[str]) -> tuple[int, bool]:
    with os.fdopen(os.dup(fd), "rb") as fh:
        lines = fh.read().splitlines(keepends=True)
    keep = [ln for ln in lines if not (ln.endswith(b"\n") and _entry_id(ln) in ids)]
    removed = len(lines) - len(keep)
    if not removed:
        return 0, False
    if not any(ln.strip() for ln in keep):
        os.unlink(path)
        fsync_dir(path.parent)
        return removed, True
    replace_synced(path, b"".join(keep))
    return removed, False


def remove_from_s3(client: Any, bucket: str, key: str, ids: set[str]) -> tuple[int, bool]:
    """Remove the entries with ``ids`` from one object (see the module docstring):
    (how many were removed, whether the object was deleted with nothing kept)."""
    from kinesis_spout.deadletter.s3 import read_s3_object

    try:
        entries = read_s3_object(client, bucket, key)
    except Exception:
        if _missing(client, bucket, key):
            return 0, False  # removed by another re-drive
        raise
    keep = [e for e in entries if str(e.get("message_id")) not in ids]
    removed = len(entries) - len(keep)
    if not removed:
        return 0, False
    if keep:
        body = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in keep)
        new_key = f"{key.removesuffix('.jsonl')}-kept-{uuid.uuid4().hex[:12]}.jsonl"
        client.put_object(
            Bucket=bucket,
            Key=new_key,
            Body=body.encode("utf-8"),
            ContentType="application/x-ndjson",
        )
    client.delete_object(Bucket=bucket, Key=key)
    return removed, not keep


def _missing(client: Any, bucket: str, key: str) -> bool:
    with contextlib.suppress(Exception):
        client.head_object(Bucket=bucket, Key=key)
        return False
    return True
