"""A :class:`~.model.StatusReport` as a table for people or one JSON document for scripts.

The JSON document's keys are stable (documented in docs/operations.md; ``format``
changes if one is removed or changes meaning). Times are ISO 8601 UTC, ages
seconds (floats), sequence numbers decimal strings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kinesis_spout.records import Checkpoint
from kinesis_spout.status.collect import age
from kinesis_spout.status.model import (
    JobLeaseStatus,
    LagProbe,
    ShardLease,
    ShardStatus,
    StatusReport,
    Summary,
    WorkerInfo,
)

#: Version of the JSON document.
JSON_FORMAT = 1


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt is not None else None


def _secs(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _checkpoint(cp: Checkpoint | None, age: float | None) -> dict[str, Any] | None:
    if cp is None:
        return None
    return {
        "sequence": cp.sequence_number,
        "sub_sequence": cp.sub_sequence_number,
        "shard_end": cp.shard_end,
        "start_at": _iso(cp.start_at),
        "owner": cp.owner or None,
        "updated_at": _iso(cp.updated_at),
        "age_seconds": _secs(age),
    }


def _lease(lease: ShardLease | None, age: float | None) -> dict[str, Any] | None:
    if lease is None:
        return None
    return {
        "owner": lease.owner,
        "host": lease.host,
        "pid": lease.pid,
        "acquired_at": _iso(lease.acquired_at),
        "age_seconds": _secs(age),
        "epoch": lease.epoch,
    }


def _lag(lag: LagProbe | None, next_age: float | None) -> dict[str, Any] | None:
    if lag is None:
        return None
    return {
        "pending": lag.pending,
        "millis_behind_latest": lag.millis_behind_latest,
        "next_record_arrival": _iso(lag.next_arrival),
        "next_record_age_seconds": _secs(next_age),
        "error": lag.error,
    }


def _shard(s: ShardStatus) -> dict[str, Any]:
    return {
        "shard_id": s.shard_id,
        "state": s.phase.value,
        "parents": list(s.parents),
        "checkpoint": _checkpoint(s.checkpoint, s.checkpoint_age),
        "lease": _lease(s.lease, s.lease_age),
        "lag": _lag(s.lag, s.next_record_age),
        "dead_letters": s.dead_letters,
    }


def _job_lease(j: JobLeaseStatus, now: datetime) -> dict[str, Any]:
    return {
        "state": j.state.value,
        "where": j.where,
        "holder": j.holder,
        "since": _iso(j.since),
        "age_seconds": _secs(age(now, j.since)),
        "holder_gone": j.holder_gone,
    }


def _worker(w: WorkerInfo) -> dict[str, Any]:
    return {"worker_id": w.worker_id, "host": w.host, "pid": w.pid, "since": _iso(w.since)}


def _summary(s: Summary) -> dict[str, Any]:
    return {
        "shards": s.shards,
        "states": dict(s.by_phase),
        "checkpoints": s.checkpoints,
        "pending": s.pending,
        "max_millis_behind_latest": s.max_millis_behind_latest,
        "oldest_checkpoint_age_seconds": _secs(s.oldest_checkpoint_age),
        "dead_letters": s.dead_letters,
        "unowned": list(s.unowned),
    }


def to_json(report: StatusReport, *others: StatusReport) -> str:
    """The report as one JSON document (see docs/operations.md for every key): the first
    stream's keys at the top, as a job of one stream has them, but for ``summary`` and
    ``kinesis_calls``, which are the whole job's; and ``streams``, the document of each
    stream of the job (``others``: the streams after the first)."""
    reports = (report, *others)
    doc = {
        "format": JSON_FORMAT,
        "generated_at": _iso(report.generated_at),
        **_document(report),
        "summary": job_summary(reports),
        "kinesis_calls": sum(r.kinesis_calls for r in reports),
        "streams": [_document(r) for r in reports],
    }
    return json.dumps(doc, indent=2)


def job_summary(reports: Sequence[StatusReport]) -> dict[str, Any]:
    """The summaries of every stream's report added up: ``shards``, ``states``,
    ``checkpoints``, ``pending`` and ``dead_letters`` summed, the largest lag and the
    oldest checkpoint; ``unowned`` shards as ``<stream>/<shard>`` when there are several
    streams. One stream: its own summary, plus ``streams``: 1."""
    sums = [_summary(r.summary) for r in reports]
    if len(sums) == 1:
        return {**sums[0], "streams": 1}
    states: dict[str, int] = {}
    for one in sums:
        for state, n in one["states"].items():
            states[state] = states.get(state, 0) + n
    lags = [
        o["max_millis_behind_latest"] for o in sums if o["max_millis_behind_latest"] is not None
    ]
    ages = [o["oldest_checkpoint_age_seconds"] for o in sums]
    dead = [o["dead_letters"] for o in sums if o["dead_letters"] is not None]
    return {
        "shards": sum(o["shards"] for o in sums),
        "states": states,
        "checkpoints": sum(o["checkpoints"] for o in sums),
        "pending": sum(o["pending"] for o in sums),
        "max_millis_behind_latest": max(lags, default=None),
        "oldest_checkpoint_age_seconds": max((a for a in ages if a is not None), default=None),
        "dead_letters": sum(dead) if dead else None,
        "unowned": [f"{r.stream}/{s}" for r in reports for s in r.summary.unowned],
        "streams": len(sums),
    }


def _document(report: StatusReport) -> dict[str, Any]:
    """One stream's part of the document."""
    return {
        "job": report.job,
        "stream": report.stream,
        "stream_status": report.stream_status,
        "checkpoint_store": report.checkpoint_store,
        "dead_letter": report.dead_letter,
        "job_lease": _job_lease(report.job_lease, report.generated_at),
        "workers": None if report.workers is None else [_worker(w) for w in report.workers],
        "shards": [_shard(s) for s in report.shards],
        "summary": _summary(report.summary),
        "kinesis_calls": report.kinesis_calls,
        "notes": list(report.notes),
        "problems": list(report.problems),
    }
