"""Putting dead letters back on a stream, at most once per entry: the re-drive log.

Each PutRecords answer's accepted entries are recorded, durably, in the re-drive log of
the dead-letter target before anything else is put, and a re-drive skips the entries the
log says it already put on the same stream: one that failed half-way can be run again
and puts only what is left. The one window is a single PutRecords call (Kinesis has no
idempotent put). The log sits beside the entries where no reader looks: ``redrive.log``
(JSON lines, fsynced per answer) in a directory, one object per answer under
``_redrive/`` in S3; a line is ``{"message_id", "to_stream", "sequence_number", "at"}``.
Where it lives: docs/operations.md ("Dead letters: list and re-drive").
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from kinesis_spout.config import SpoutConfig

LOG_NAME = "redrive.log"
S3_LOG_DIR = "_redrive"


@dataclass(frozen=True, slots=True)
class Redriven:
    """One entry put back: its id, where, and the sequence number Kinesis gave it."""

    message_id: str
    to_stream: str
    sequence_number: str

    def line(self, at: str) -> str:
        obj = {
            "message_id": self.message_id,
            "to_stream": self.to_stream,
            "sequence_number": self.sequence_number,
            "at": at,
        }
        return json.dumps(obj, separators=(",", ":")) + "\n"


class RedriveLog(Protocol):
    def done(self, to_stream: str) -> set[str]:
        """The ids already put on ``to_stream`` by earlier re-drives."""
        ...

    def record(self, items: Iterable[Redriven]) -> None:
        """Make ``items`` durable (before the next PutRecords)."""
        ...


def _ids(text: str, to_stream: str) -> set[str]:
    out: set[str] = set()
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:  # a line cut short by a crash: its batch was not logged
            continue
        if isinstance(obj, dict) and obj.get("to_stream") == to_stream:
            out.add(str(obj.get("message_id")))
    return out


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class FileRedriveLog:
    """``<dir>/<job>/<stream>/redrive.log``, appended and fsynced."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOG_NAME

    def done(self, to_stream: str) -> set[str]:
        try:
            return _ids(self.path.read_text(encoding="utf-8"), to_stream)
        except FileNotFoundError:
            return set()

    def record(self, items: Iterable[Redriven]) -> None:
        body = "".join(item.line(_now()) for item in items).encode("utf-8")
        if not body:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size and not _ends_with_newline(fd):
                body = b"\n" + body  # after a torn line, start on a line of its own
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)


def _ends_with_newline(fd: int) -> bool:
    return os.pread(fd, 1, os.fstat(fd).st_size - 1) == b"\n"


class S3RedriveLog:
    """One object per PutRecords answer under ``<prefix>/<job>/<stream>/_redrive/``."""

    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix + S3_LOG_DIR + "/"

    def done(self, to_stream: str) -> set[str]:
        from kinesis_spout.deadletter.s3 import DeadLetterWriteError, describe_error

        out: set[str] = set()
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    body = self.client.get_object(Bucket=self.bucket, Key=obj["Key"])["Body"]
                    out |= _ids(body.read().decode("utf-8"), to_stream)
        except Exception as exc:
            raise DeadLetterWriteError(
                f"reading the re-drive log s3://{self.bucket}/{self.prefix} failed: "
                f"{describe_error(exc)}"
            ) from exc
        return out

    def record(self, items: Iterable[Redriven]) -> None:
        from kinesis_spout.deadletter.s3 import DeadLetterWriteError, describe_error

        at = _now()
        body = "".join(item.line(at) for item in items).encode("utf-8")
        if not body:
            return
        key = f"{self.prefix}{at.replace(':', '')}-{uuid.uuid4().hex[:12]}.log"
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body)
        except Exception as exc:
            raise DeadLetterWriteError(
                f"writing the re-drive log s3://{self.bucket}/{key} failed: {describe_error(exc)}"
            ) from exc


def open_redrive_log(cfg: SpoutConfig, s3: Any = None) -> RedriveLog:
    """The re-drive log of ``cfg``'s dead-letter target, job and stream."""
    if cfg.dead_letter.startswith("s3://"):
        from kinesis_spout.deadletter.s3 import key_prefix, parse_s3_url

        bucket, prefix = parse_s3_url(cfg.dead_letter)
        return S3RedriveLog(s3, bucket, key_prefix(prefix, cfg.job_name, cfg.stream_name))
    return FileRedriveLog(Path(cfg.dead_letter) / cfg.job_name / cfg.stream_name)
