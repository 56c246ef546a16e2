"""The streaming source's offsets: one batch's plan, pure, no I/O.

An offset *is* one micro-batch: its id and, per shard, where its read starts and how many
records it may take. Where each read stopped is not in it (``latestOffset`` reads no
records): the read task records it under ``(batch, shard)``
(:mod:`~kinesis_spout.checkpoint.batch_ends`), and the next offset starts there. A source
of one stream writes version 2 (:class:`BatchOffset`), one of several streams version 3
(:class:`StreamsOffset`, a version-2 plan per stream), so a release that reads only
version 2 refuses it by name instead of reading one stream's plan as the query's. The
JSON is canonical (sorted keys, fixed shape): Spark compares offsets as JSON to decide
"no new data". The format, field by field: ``docs/streaming-source.md``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kinesis_spout.records import ShardPosition, StartPosition
from kinesis_spout.streaming.errors import OffsetError

OFFSET_VERSION = 2
STREAMS_VERSION = 3
"""The version of an offset over several streams (:class:`StreamsOffset`)."""

RUN_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
"""What a run id may be (it is a path component of the batch-end records)."""


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """One shard in a batch: its position before the batch and its quota."""

    position: ShardPosition | None = None
    quota: int = 0
    parents: tuple[str, ...] = ()

    @property
    def ended(self) -> bool:
        return self.position is not None and self.position.ended

    def to_json(self) -> dict[str, Any]:
        out = self.position.to_json() if self.position is not None else {}
        if self.quota:
            out["q"] = self.quota
        if self.parents:
            out["parents"] = list(self.parents)
        return out

    @classmethod
    def from_json(cls, doc: Any, where: str) -> ShardPlan:
        if not isinstance(doc, dict):
            raise OffsetError(f"{where}: expected an object, got {doc!r}")
        rest = {k: v for k, v in doc.items() if k not in ("q", "parents")}
        quota, parents = doc.get("q", 0), doc.get("parents", [])
        if isinstance(quota, bool) or not isinstance(quota, int) or quota < 0:
            raise OffsetError(f"{where}: 'q' must be an integer >= 0 in {doc!r}")
        if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
            raise OffsetError(f"{where}: 'parents' must be a list of shard ids in {doc!r}")
        position = ShardPosition.from_json(rest, where) if rest else None
        return cls(position, quota, tuple(parents))


@dataclass(frozen=True, slots=True)
class BatchOffset:
    """One batch's plan (see the module docstring)."""

    stream_name: str
    job_name: str
    batch: int
    start: StartPosition
    shards: Mapping[str, ShardPlan] = field(default_factory=dict)
    cutoff: datetime | None = None
    run: str = ""
    """The run id (see the module docstring); ``""`` in offsets of earlier releases."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": OFFSET_VERSION,
            "stream": self.stream_name,
            "job": self.job_name,
            "batch": self.batch,
            "start": self.start.to_json(),
            "shards": {s: self.shards[s].to_json() for s in sorted(self.shards)},
        }
        if self.cutoff is not None:
            out["cutoff"] = self.cutoff.astimezone(UTC).isoformat()
        if self.run:
            out["run"] = self.run
        return out

    @property
    def reads(self) -> dict[str, ShardPlan]:
        """The shards this batch reads (quota > 0), by id."""
        return {s: p for s, p in sorted(self.shards.items()) if p.quota > 0}

    @classmethod
    def from_json(cls, doc: Any) -> BatchOffset:
        """Parse what :meth:`to_json` produced; :class:`OffsetError` naming what is wrong."""
        if not isinstance(doc, dict):
            raise OffsetError(f"a Kinesis source offset must be an object, got {doc!r:.200}")
        version = doc.get("version")
        if version != OFFSET_VERSION:
            raise OffsetError(
                f"Kinesis source offset version {version!r} is not supported (this version "
                f"reads {OFFSET_VERSION} and {STREAMS_VERSION}; version 1 was the read-ahead "
                "source of earlier releases): use a new checkpoint location"
            )
        stream, job, batch = doc.get("stream"), doc.get("job"), doc.get("batch")
        if not isinstance(stream, str) or not stream:
            raise OffsetError(f"offset 'stream' must be a stream name, got {stream!r}")
        if not isinstance(job, str) or not job:
            raise OffsetError(f"offset 'job' must be a job name, got {job!r}")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
            raise OffsetError(f"offset 'batch' must be an integer >= 0, got {batch!r}")
        shards = doc.get("shards")
        if not isinstance(shards, dict):
            raise OffsetError(f"offset 'shards' must be an object, got {shards!r:.200}")
        cutoff = None
        if "cutoff" in doc:
            try:
                cutoff = datetime.fromisoformat(str(doc["cutoff"]))
            except ValueError:
                raise OffsetError(
                    f"offset 'cutoff' is not a timestamp: {doc['cutoff']!r}"
                ) from None
            if cutoff.tzinfo is None:
                raise OffsetError(f"offset 'cutoff' has no time zone: {doc['cutoff']!r}")
        run = doc.get("run", "")
        if not isinstance(run, str) or not (run == "" or RUN_ID.fullmatch(run)):
            raise OffsetError(f"offset 'run' must match {RUN_ID.pattern}, got {run!r:.100}")
        plans = {
            str(s): ShardPlan.from_json(p, f"offset of {stream}/{s}") for s, p in shards.items()
        }
        start = StartPosition.from_json(doc.get("start"))
        return cls(stream, job, batch, start, plans, cutoff, run)


@dataclass(frozen=True, slots=True)
class StreamsOffset:
    """One batch's plan over the source's streams: one :class:`BatchOffset` per stream,
    by name, all of the same job, batch, run and cutoff. Of one stream, its JSON is that
    stream's (version 2); of several, version 3 (see the module docstring)."""

    parts: Mapping[str, BatchOffset]

    def __post_init__(self) -> None:
        if not self.parts:
            raise OffsetError("an offset plans at least one stream")
        first = next(iter(self.parts.values()))
        for name, part in self.parts.items():
            if part.stream_name != name:
                raise OffsetError(f"offset part {name!r} plans stream {part.stream_name!r}")
            mine = (part.job_name, part.batch, part.run, part.cutoff)
            if mine != (first.job_name, first.batch, first.run, first.cutoff):
                raise OffsetError(
                    f"the streams of one offset differ in job, batch, run or cutoff: {name!r} "
                    f"has {mine}, {first.stream_name!r} has "
                    f"{(first.job_name, first.batch, first.run, first.cutoff)}"
                )

    @classmethod
    def of(cls, parts: Iterable[BatchOffset]) -> StreamsOffset:
        return cls({p.stream_name: p for p in parts})

    @property
    def _first(self) -> BatchOffset:
        return next(iter(self.parts.values()))

    @property
    def job_name(self) -> str:
        return self._first.job_name

    @property
    def batch(self) -> int:
        return self._first.batch

    @property
    def run(self) -> str:
        return self._first.run

    @property
    def cutoff(self) -> datetime | None:
        return self._first.cutoff

    @property
    def streams(self) -> list[str]:
        """The streams' names, sorted."""
        return sorted(self.parts)

    def to_json(self) -> dict[str, Any]:
        if len(self.parts) == 1:
            return self._first.to_json()
        out = self._first.to_json()
        for key in ("stream", "start", "shards"):
            del out[key]
        out["version"] = STREAMS_VERSION
        out["streams"] = {
            name: {k: v for k, v in self.parts[name].to_json().items() if k in _PART_KEYS}
            for name in self.streams
        }
        return out

    @classmethod
    def from_json(cls, doc: Any) -> StreamsOffset:
        """Parse a version-2 or version-3 offset; :class:`OffsetError` naming what is wrong."""
        if not isinstance(doc, dict) or doc.get("version") != STREAMS_VERSION:
            return cls.of([BatchOffset.from_json(doc)])
        streams = doc.get("streams")
        if not isinstance(streams, dict) or len(streams) < 2:
            raise OffsetError(
                f"offset 'streams' must be an object of two or more streams, got {streams!r:.200}"
            )
        common = {k: v for k, v in doc.items() if k != "streams"}
        parts = []
        for name, part in streams.items():
            if not isinstance(part, dict) or set(part) - set(_PART_KEYS):
                raise OffsetError(
                    f"offset of stream {name!r} must be an object of {', '.join(_PART_KEYS)}, "
                    f"got {part!r:.200}"
                )
            parts.append(
                BatchOffset.from_json(
                    {**common, **part, "version": OFFSET_VERSION, "stream": str(name)}
                )
            )
        return cls.of(parts)


_PART_KEYS = ("start", "shards")
"""What a stream's entry of a version-3 offset holds."""
