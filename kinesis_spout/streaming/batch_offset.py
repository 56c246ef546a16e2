"""The streaming source's offsets (version 2): one batch's plan, pure, no I/O.

An offset *is* one micro-batch: its id and, per shard, where its read starts
and how many records it may take. Where each read stopped is not in the
offset (``latestOffset`` never reads records): the executor task records it in
the checkpoint store under ``(batch, shard)``
(:mod:`~kinesis_spout.checkpoint.batch_ends`), and the next batch's offset
starts there::

    {"version": 2, "stream": "orders", "job": "spark-orders", "batch": 7,
     "run": "3f2a...", "start": {"type": "TRIM_HORIZON"},
     "shards": {
       "shardId-000000000000": {"seq": "4959...", "sub": 0, "n": 250, "q": 10000},
       "shardId-000000000001": {"q": 10000},
       "shardId-000000000002": {"seq": "4959...", "sub": 0, "ended": true, "n": 0},
       "shardId-000000000003": {"q": 10000, "parents": ["shardId-000000000002"]}}}

* ``seq``/``sub``/``partial``/``ended``/``n``: the shard's position before this
  batch (the last record of earlier batches, see
  :class:`~kinesis_spout.records.ShardPosition`); no ``seq``: the shard starts
  at ``start`` (deterministic: LATEST is pinned to a timestamp).
* ``q``: how many user records this batch may read from the shard (0 or
  absent: none, e.g. it was found idle a moment ago, or it ended).
* ``parents``: the shard's parents (lineage): a child gets a quota only once
  each listed parent is ``ended`` in an offset whose batch ran before.
* ``cutoff`` (``Trigger.AvailableNow``): records that arrived later are not read.
* ``run``: drawn by the initial offset, so it names the Spark checkpoint location
  (batch ids restart at 1 in a new one); the batch-end records are kept per run.
  Absent in offsets of earlier releases.

Spark compares offsets as JSON to decide "no new data", so the JSON is
canonical (sorted keys, fixed shape). Batch 0 is the initial offset: it
reads nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kinesis_spout.records import ShardPosition, StartPosition
from kinesis_spout.streaming.errors import OffsetError

OFFSET_VERSION = 2

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
                f"reads {OFFSET_VERSION}; version 1 was the read-ahead source of earlier "
                "releases): use a new checkpoint location"
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
