"""Assembling a :class:`~.model.StatusReport` from what the sources read (pure: no I/O,
the time is an argument)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from kinesis_spout.kinesis.shards import ShardMap
from kinesis_spout.records import Checkpoint, ShardInfo
from kinesis_spout.status.model import (
    JobLeaseStatus,
    LagProbe,
    LeaseState,
    ProbeStart,
    ShardLease,
    ShardPhase,
    ShardStatus,
    StatusReport,
    Summary,
    WorkerInfo,
)


@dataclass(frozen=True, slots=True)
class StatusInputs:
    """Everything the sources read, before assembly."""

    job: str
    stream: str
    stream_status: str
    checkpoint_store: str
    dead_letter: str
    initial_position: str
    shards: tuple[ShardInfo, ...]
    checkpoints: Mapping[str, Checkpoint]
    job_lease: JobLeaseStatus
    leases: Mapping[str, ShardLease] | None = None
    """None: the store has no shard leases (``file://``)."""
    workers: tuple[WorkerInfo, ...] | None = None
    lags: Mapping[str, LagProbe] = field(default_factory=dict)
    dead_letters: Mapping[str, int] | None = None
    """Per shard; None when the target keeps none or could not be read."""
    kinesis_calls: int = 0
    problems: tuple[str, ...] = ()
    store_missing: str | None = None
    """The store does not exist yet (no reader checkpointed there): what is missing."""


def shard_phases(
    shards: Sequence[ShardInfo], checkpoints: Mapping[str, Checkpoint]
) -> dict[str, ShardPhase]:
    """The phase of every listed shard and every checkpointed one, in shard order
    (listed shards first); see :class:`~.model.ShardPhase`."""
    smap = ShardMap(shards)
    for shard_id, cp in checkpoints.items():
        if cp.shard_end:
            smap.mark_ended(shard_id)
    out: dict[str, ShardPhase] = {}
    for shard_id in smap.ids():
        info = smap.get(shard_id)
        assert info is not None
        if smap.is_ended(shard_id):
            out[shard_id] = ShardPhase.ENDED
        elif smap.pending_parents(shard_id):
            out[shard_id] = ShardPhase.WAITING
        elif info.is_closed:
            out[shard_id] = ShardPhase.CLOSED
        else:
            out[shard_id] = ShardPhase.OPEN
    for shard_id in sorted(set(checkpoints) - set(out)):
        out[shard_id] = ShardPhase.UNLISTED
    return out


def probe_start(
    phase: ShardPhase,
    checkpoint: Checkpoint | None,
    initial_position: str,
    initial_timestamp: datetime | None = None,
) -> ProbeStart | None:
    """Where reading of the shard resumes, or None when there is nothing to probe
    (ended or unlisted shards; no checkpoint and ``LATEST``: nothing is behind)."""
    if phase in (ShardPhase.ENDED, ShardPhase.UNLISTED):
        return None
    if checkpoint is not None and checkpoint.sequence_number is not None:
        return ProbeStart("AFTER_SEQUENCE_NUMBER", sequence=checkpoint.sequence_number)
    if checkpoint is not None and checkpoint.start_at is not None:
        return ProbeStart("AT_TIMESTAMP", timestamp=checkpoint.start_at)
    if initial_position == "AT_TIMESTAMP" and initial_timestamp is not None:
        return ProbeStart("AT_TIMESTAMP", timestamp=initial_timestamp)
    if initial_position == "TRIM_HORIZON":
        return ProbeStart("TRIM_HORIZON")
    return None


def probe_starts(
    shards: Sequence[ShardInfo],
    checkpoints: Mapping[str, Checkpoint],
    initial_position: str,
    initial_timestamp: datetime | None = None,
) -> dict[str, ProbeStart]:
    """:func:`probe_start` of every shard that has something to probe."""
    out: dict[str, ProbeStart] = {}
    for shard_id, phase in shard_phases(shards, checkpoints).items():
        start = probe_start(phase, checkpoints.get(shard_id), initial_position, initial_timestamp)
        if start is not None:
            out[shard_id] = start
    return out


def age(now: datetime, then: datetime | None) -> float | None:
    """Seconds from ``then`` to ``now`` (never negative: clocks of other hosts), or None."""
    return None if then is None else max(0.0, (now - then).total_seconds())


def _row(
    inputs: StatusInputs, shard_id: str, phase: ShardPhase, parents: tuple[str, ...], now: datetime
) -> ShardStatus:
    cp = inputs.checkpoints.get(shard_id)
    lease = inputs.leases.get(shard_id) if inputs.leases is not None else None
    lag = inputs.lags.get(shard_id)
    dead = None if inputs.dead_letters is None else inputs.dead_letters.get(shard_id, 0)
    return ShardStatus(
        shard_id=shard_id,
        phase=phase,
        parents=parents,
        checkpoint=cp,
        checkpoint_age=age(now, cp.updated_at) if cp else None,
        lease=lease,
        lease_age=age(now, lease.acquired_at) if lease else None,
        lag=lag,
        next_record_age=age(now, lag.next_arrival) if lag else None,
        dead_letters=dead,
    )


def summarize(
    rows: Sequence[ShardStatus], dead_letters: Mapping[str, int] | None, has_workers: bool
) -> Summary:
    """Totals over ``rows``; dead letters count every shard of the target, listed or not."""
    behind = [
        r.lag.millis_behind_latest
        for r in rows
        if r.lag is not None and r.lag.millis_behind_latest is not None
    ]
    ages = [r.checkpoint_age for r in rows if r.checkpoint_age is not None]
    live = (ShardPhase.OPEN, ShardPhase.CLOSED)
    return Summary(
        shards=len(rows),
        by_phase=tuple((p.value, sum(r.phase is p for r in rows)) for p in ShardPhase),
        checkpoints=sum(r.checkpoint is not None for r in rows),
        pending=sum(bool(r.lag and r.lag.pending) for r in rows),
        max_millis_behind_latest=max(behind, default=None),
        oldest_checkpoint_age=max(ages, default=None),
        dead_letters=None if dead_letters is None else sum(dead_letters.values()),
        unowned=tuple(r.shard_id for r in rows if has_workers and r.phase in live and not r.lease),
    )


def _notes(inputs: StatusInputs, has_workers: bool) -> tuple[str, ...]:
    notes = []
    if not inputs.checkpoints:
        notes.append(
            f"no checkpoints yet for job {inputs.job!r} on stream {inputs.stream!r}: "
            f"every shard starts at {inputs.initial_position}"
        )
    if inputs.store_missing:
        notes.append(
            f"{inputs.store_missing} (the first checkpoint creates it; "
            "if the job has run, check checkpoint_store)"
        )
    lease = inputs.job_lease
    if not has_workers and lease.state is LeaseState.HELD:
        notes.append(
            f"no worker holds shard leases: the job-lease holder {lease.holder} reads every shard"
        )
    if inputs.dead_letter.lower() == "none":
        notes.append("dead_letter = none: given-up records are logged, not kept")
    return tuple(notes)


def collect(inputs: StatusInputs, now: datetime) -> StatusReport:
    """The report of ``inputs`` as seen at ``now`` (ages are relative to it)."""
    phases = shard_phases(inputs.shards, inputs.checkpoints)
    parents = {s.shard_id: s.parents for s in inputs.shards}
    rows = tuple(
        _row(inputs, shard_id, phase, parents.get(shard_id, ()), now)
        for shard_id, phase in phases.items()
    )
    has_workers = bool(inputs.workers)
    return StatusReport(
        generated_at=now,
        job=inputs.job,
        stream=inputs.stream,
        stream_status=inputs.stream_status,
        checkpoint_store=inputs.checkpoint_store,
        dead_letter=inputs.dead_letter,
        job_lease=inputs.job_lease,
        workers=inputs.workers,
        shards=rows,
        summary=summarize(rows, inputs.dead_letters, has_workers),
        kinesis_calls=inputs.kinesis_calls,
        notes=_notes(inputs, has_workers),
        problems=inputs.problems,
    )
