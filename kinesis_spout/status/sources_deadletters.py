"""Counting dead letters per shard in the configured target, read only.

* a directory: ``<dir>/<job>/<stream>/<shard>.jsonl``, one entry per complete line
  (a line cut short by a crash is not an entry; an id found twice counts once);
  a directory that does not exist holds none;
* ``s3://bucket/prefix``: ``<prefix>/<job>/<stream>/<shard>/*.jsonl``: one
  ListObjectsV2 call per 1,000 objects plus one GetObject per object (one object
  per write of a shard's given-up records);
* ``none``: nothing is kept (None).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kinesis_spout.deadletter import entry_ids
from kinesis_spout.errors import KinesisSpoutError

if TYPE_CHECKING:
    from kinesis_spout.aws import AssumedRole


def count_directory(directory: Path, job: str, stream: str) -> dict[str, int]:
    """``{shard: entries}`` of a JSON-lines dead-letter directory."""
    base = directory / job / stream
    out: dict[str, int] = {}
    if not base.is_dir():
        return out
    for path in sorted(base.glob("*.jsonl")):
        with path.open("rb") as fh:
            out[path.stem] = len(entry_ids(fh, path)[0])
    return out


def count_s3(
    target: str,
    job: str,
    stream: str,
    client: object = None,
    *,
    profile: str | None = None,
    role: AssumedRole | None = None,
) -> dict[str, int]:
    """``{shard: entries}`` of an ``s3://bucket/prefix`` dead-letter target."""
    from kinesis_spout.deadletter.s3 import (
        iter_s3_keys,
        key_prefix,
        parse_s3_url,
        read_s3_object,
        s3_client,
    )

    bucket, prefix = parse_s3_url(target)
    s3 = client if client is not None else s3_client(profile=profile, role=role)
    base = key_prefix(prefix, job, stream)
    ids: dict[str, set[str]] = {}
    for key in iter_s3_keys(s3, bucket, base):
        shard = key[len(base) :].split("/", 1)[0]
        entries = read_s3_object(s3, bucket, key)
        ids.setdefault(shard, set()).update(str(e.get("message_id")) for e in entries)
    return {shard: len(v) for shard, v in ids.items()}


def count_dead_letters(
    target: str,
    job: str,
    stream: str,
    *,
    profile: str | None = None,
    role: AssumedRole | None = None,
) -> tuple[dict[str, int] | None, str | None]:
    """``(counts per shard, problem)``: counts are None when the target keeps none
    (``none``) or could not be read (then ``problem`` says why)."""
    if target.lower() == "none":
        return None, None
    try:
        if target.startswith("s3://"):
            return count_s3(target, job, stream, profile=profile, role=role), None
        return count_directory(Path(target), job, stream), None
    except (KinesisSpoutError, OSError, ValueError) as exc:
        return None, f"dead letters in {target} not counted: {exc}"
