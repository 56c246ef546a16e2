"""Dead letters in S3: ``dead_letter = "s3://bucket/prefix"``.

Each write of a shard's given-up records is one object of JSON lines (the file sink's
entries), written before the checkpoint can pass them, under a key named by its first
record. On its first write to a shard the sink reads the ids already stored under the
shard's prefix and leaves those out, so every given-up record has exactly one entry
across restarts and an object is never overwritten with other content. A failing write
raises :class:`DeadLetterWriteError` naming the bucket, key and S3 error; the shard's
checkpoint then waits below the records and the write is tried again before each save.
The key layout, the entry's fields and the IAM actions: docs/spark-job.md ("Dead letters
in S3") and docs/deploy.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from kinesis_spout.deadletter.base import DeadLetter, dead_letter_entry
from kinesis_spout.errors import KinesisSpoutError

if TYPE_CHECKING:
    from kinesis_spout.aws import AssumedRole

# The logger the S3 sink had before the dead-letter modules became a package.
log = logging.getLogger("kinesis_spout.deadletter_s3")


class DeadLetterWriteError(KinesisSpoutError):
    """A dead-letter object could not be written or read (names the bucket, key, cause)."""


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix")`` (no trailing slash)."""
    if not url.startswith("s3://"):
        raise ValueError(f"not an s3:// URL: {url!r}")
    bucket, _, prefix = url[5:].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {url!r}")
    return bucket, prefix.strip("/")


def key_prefix(prefix: str, *parts: str) -> str:
    """``prefix/part/.../`` of the dead-letter layout (an empty prefix, the bucket's root,
    is left out): ``<prefix>/<job>/<stream>/`` and ``<prefix>/<job>/<stream>/<shard>/``."""
    return "/".join(p for p in (prefix, *parts) if p) + "/"


def s3_client(
    one_shot: bool = False,
    *,
    region: str | None = None,
    profile: str | None = None,
    role: AssumedRole | None = None,
) -> Any:
    """An S3 client with short timeouts and few retries (a failed write is tried
    again before each checkpoint save anyway); ``one_shot`` (the CLI): botocore's
    standard retry mode. ``region``, ``profile`` and ``role`` as the config resolves them
    (:mod:`kinesis_spout.aws`)."""
    from botocore.config import Config

    from kinesis_spout.aws import boto_session, resolve_region

    region = region or resolve_region(profile)
    retries: Any = {"max_attempts": 2}
    if one_shot:
        retries = {"mode": "standard", "total_max_attempts": 3}
    config = Config(connect_timeout=5, read_timeout=30, retries=retries)
    return boto_session(profile, role).client("s3", region_name=region, config=config)


def describe_error(exc: BaseException) -> str:
    """``Code: message`` of a botocore error, else the exception's text."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        err = response.get("Error") or {}
        code = err.get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return f"{code}: {err.get('Message') or exc}"
    return f"{type(exc).__name__}: {exc}"


class S3DeadLetterSink:
    """See the module docstring."""

    def __init__(self, target: str, job_name: str, client: Any = None) -> None:
        self.bucket, self.prefix = parse_s3_url(target)
        self.job_name = job_name
        self.client = client if client is not None else s3_client()
        self._seen: dict[tuple[str, str], set[str]] = {}
        self.written = 0
        self.objects = 0

    def shard_prefix(self, stream_name: str, shard_id: str) -> str:
        return key_prefix(self.prefix, self.job_name, stream_name, shard_id)

    def key_for(self, letter: DeadLetter) -> str:
        r = letter.record
        name = f"{int(r.sequence_number):064d}-{r.sub_sequence_number:010d}.jsonl"
        return self.shard_prefix(r.stream_name, r.shard_id) + name

    def write_many(self, letters: Sequence[DeadLetter]) -> None:
        by_shard: dict[tuple[str, str], list[DeadLetter]] = {}
        for letter in letters:
            r = letter.record
            by_shard.setdefault((r.stream_name, r.shard_id), []).append(letter)
        for k, group in by_shard.items():
            self._write_shard(k, group)

    def _write_shard(self, k: tuple[str, str], letters: list[DeadLetter]) -> None:
        seen = self._seen.get(k)
        if seen is None:
            seen = self._load_seen(self.shard_prefix(*k))
            self._seen[k] = seen
        fresh: list[DeadLetter] = []
        ids: set[str] = set()
        for letter in letters:
            mid = letter.record.message_id
            if mid in seen or mid in ids:
                log.info(
                    "%s/%s is already in the dead-letter bucket (replayed)",
                    letter.record.stream_name,
                    mid,
                )
                continue
            fresh.append(letter)
            ids.add(mid)
        if not fresh:
            return
        key = self.key_for(fresh[0])
        body = "".join(
            json.dumps(
                dead_letter_entry(d.record, d.error, d.attempts, self.job_name, d.reason),
                separators=(",", ":"),
            )
            + "\n"
            for d in fresh
        ).encode("utf-8")
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=key, Body=body, ContentType="application/x-ndjson"
            )
        except Exception as exc:
            raise DeadLetterWriteError(
                f"dead-letter write to s3://{self.bucket}/{key} failed: {describe_error(exc)}"
            ) from exc
        seen.update(ids)
        self.written += len(fresh)
        self.objects += 1
        for d in fresh:
            log.warning(
                "dead-lettered %s/%s (%s) after %d attempts to s3://%s/%s: %s",
                d.record.stream_name,
                d.record.message_id,
                d.reason,
                d.attempts,
                self.bucket,
                key,
                d.error,
            )

    def _load_seen(self, prefix: str) -> set[str]:
        """The ids already stored under a shard's prefix (a replay must not add them)."""
        seen: set[str] = set()
        for entry in iter_s3_entries(self.client, self.bucket, prefix):
            seen.add(str(entry.get("message_id")))
        return seen

    def close(self) -> None:
        return None


def iter_s3_keys(client: Any, bucket: str, prefix: str) -> Iterator[str]:
    """Every ``.jsonl`` key under ``prefix``, in key order."""
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                if obj["Key"].endswith(".jsonl"):
                    yield obj["Key"]
    except Exception as exc:
        raise DeadLetterWriteError(
            f"listing s3://{bucket}/{prefix} failed: {describe_error(exc)}"
        ) from exc


def read_s3_object(client: Any, bucket: str, key: str) -> list[dict[str, Any]]:
    """The entries of one dead-letter object."""
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as exc:
        raise DeadLetterWriteError(
            f"reading s3://{bucket}/{key} failed: {describe_error(exc)}"
        ) from exc
    out: list[dict[str, Any]] = []
    for line in body.decode("utf-8").splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def iter_s3_entries(client: Any, bucket: str, prefix: str) -> Iterator[dict[str, Any]]:
    """Every entry of every dead-letter object under ``prefix``."""
    for key in iter_s3_keys(client, bucket, prefix):
        yield from read_s3_object(client, bucket, key)
