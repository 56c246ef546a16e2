"""Dead-letter sinks: where records that ran out of retries go, with their error.

A record is given up only after ``retry_limit`` retries; it is written here
exactly once, and only then counts as done for the checkpoint. The default
sink appends JSON lines to ``<dir>/<job>/<stream>/<shard>.jsonl`` and fsyncs
before returning, so a checkpoint written afterwards can never skip a record
that is not on disk.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Protocol

from kinesis_spout.records import Record

log = logging.getLogger(__name__)


class DeadLetterSink(Protocol):
    def write(self, record: Record, error: str | None, attempts: int) -> None:
        """Persist ``record`` durably before returning."""
        ...

    def close(self) -> None: ...


def dead_letter_entry(record: Record, error: str | None, attempts: int, job: str) -> dict[str, Any]:
    """The JSON object written for one dead-lettered record."""
    return {
        "job": job,
        "stream": record.stream_name,
        "shard_id": record.shard_id,
        "sequence_number": record.sequence_number,
        "sub_sequence_number": record.sub_sequence_number,
        "message_id": record.message_id,
        "partition_key": record.partition_key,
        "data_base64": base64.b64encode(record.data).decode("ascii"),
        "approximate_arrival": (
            record.approximate_arrival.isoformat() if record.approximate_arrival else None
        ),
        "attempts": attempts,
        "error": error,
        "dead_lettered_at": datetime.now(UTC).isoformat(),
    }


class JsonlDeadLetterSink:
    """Appends one JSON line per record, one file per shard, fsynced."""

    def __init__(self, directory: str | Path, job_name: str) -> None:
        self.directory = Path(directory)
        self.job_name = job_name
        self._files: dict[tuple[str, str], IO[str]] = {}
        self.written = 0

    def path_for(self, stream_name: str, shard_id: str) -> Path:
        return self.directory / self.job_name / stream_name / f"{shard_id}.jsonl"

    def write(self, record: Record, error: str | None, attempts: int) -> None:
        k = (record.stream_name, record.shard_id)
        fh = self._files.get(k)
        if fh is None:
            p = self.path_for(*k)
            p.parent.mkdir(parents=True, exist_ok=True)
            fh = self._files[k] = p.open("a", encoding="utf-8")
        entry = dead_letter_entry(record, error, attempts, self.job_name)
        fh.write(json.dumps(entry, separators=(",", ":")) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
        self.written += 1
        log.warning("dead-lettered %s after %d attempts: %s", record.message_id, attempts, error)

    def close(self) -> None:
        for fh in self._files.values():
            fh.close()
        self._files.clear()


class LoggingDeadLetterSink:
    """``dead_letter = "none"``: records are only logged (at ERROR)."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, record: Record, error: str | None, attempts: int) -> None:
        self.written += 1
        log.error("gave up on %s after %d attempts: %s", record.message_id, attempts, error)

    def close(self) -> None:
        return None


def read_dead_letters(directory: str | Path) -> list[dict[str, Any]]:
    """Every entry under a :class:`JsonlDeadLetterSink` directory (for audits)."""
    out: list[dict[str, Any]] = []
    for p in sorted(Path(directory).rglob("*.jsonl")):
        with p.open(encoding="utf-8") as fh:
            out.extend(json.loads(line) for line in fh if line.strip())
    return out


def open_dead_letter_sink(target: str, job_name: str) -> DeadLetterSink:
    """The sink named by the ``dead_letter`` config value."""
    if target.lower() == "none":
        return LoggingDeadLetterSink()
    return JsonlDeadLetterSink(target, job_name)
