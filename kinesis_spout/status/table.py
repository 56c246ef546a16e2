"""A :class:`~.model.StatusReport` as a table for people."""

from __future__ import annotations

from collections.abc import Sequence

from kinesis_spout.checkpoint.resets import pinned_start
from kinesis_spout.status.collect import age
from kinesis_spout.status.model import (
    JobLeaseStatus,
    LeaseState,
    ShardStatus,
    StatusReport,
    WorkerInfo,
)
from kinesis_spout.words import plural

COLUMNS = ("SHARD", "STATE", "OWNER", "LEASE", "SAVED", "BEHIND", "OLDEST", "DEAD", "CHECKPOINT")


def duration(seconds: float | None) -> str:
    """``0.4s``, ``12s``, ``3m05s``, ``2h03m``, ``3d04h``; ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _checkpoint(row: ShardStatus) -> str:
    cp = row.checkpoint
    if cp is None:
        return "none"
    if cp.sequence_number is None:
        if cp.shard_end:
            return "shard end"
        return f"start at {pinned_start(cp)}"
    text = f"{cp.sequence_number}:{cp.sub_sequence_number}"
    return text + " (shard end)" if cp.shard_end else text


def _behind(row: ShardStatus) -> tuple[str, str]:
    """(BEHIND, OLDEST) cells."""
    lag = row.lag
    if lag is None:
        return "-", "-"
    if lag.pending is None:
        return "?", "?"
    if not lag.pending:
        return "caught up", "-"
    ms = lag.millis_behind_latest
    behind = "?" if ms is None else f"{ms}ms" if ms < 1000 else duration(ms / 1000.0)
    return behind, duration(row.next_record_age)


def shard_cells(row: ShardStatus) -> tuple[str, ...]:
    """The cells of one shard row, in :data:`COLUMNS` order."""
    behind, oldest = _behind(row)
    return (
        row.shard_id,
        row.phase.value,
        row.lease.owner if row.lease else "-",
        duration(row.lease_age) if row.lease else "-",
        f"{duration(row.checkpoint_age)} ago" if row.checkpoint_age is not None else "-",
        behind,
        oldest,
        "-" if row.dead_letters is None else str(row.dead_letters),
        _checkpoint(row),
    )


_LEASE_COLUMNS = (COLUMNS.index("OWNER"), COLUMNS.index("LEASE"))


def _rows(report: StatusReport) -> list[tuple[str, ...]]:
    """The header and shard rows; without OWNER and LEASE when no worker holds shard
    leases (a ``file://`` store, or the Spark job's: the job-lease holder reads every
    shard), so the table fits 80 columns."""
    rows = [COLUMNS, *(shard_cells(r) for r in report.shards)]
    if report.workers or any(r.lease is not None for r in report.shards):
        return rows
    return [tuple(c for i, c in enumerate(row) if i not in _LEASE_COLUMNS) for row in rows]


def _grid(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _job_lease(lease: JobLeaseStatus, report: StatusReport) -> str:
    if lease.state is LeaseState.FREE:
        return f"job lease: free, no reader running [{lease.where}]"
    since = ""
    if lease.since is not None:
        held = duration(age(report.generated_at, lease.since))
        since = f" since {lease.since.isoformat(timespec='seconds')} ({held})"
    gone = "; its process is gone, its lease not yet expired" if lease.holder_gone else ""
    return f"job lease: held by {lease.holder}{since}{gone} [{lease.where}]"


def _workers(workers: tuple[WorkerInfo, ...] | None) -> list[str]:
    if workers is None:
        return []
    if not workers:
        return ["workers: none registered"]
    names = ", ".join(f"{w.worker_id} ({w.host}:{w.pid})" for w in workers)
    return [f"workers: {len(workers)}: {names}"]


def _totals(report: StatusReport) -> str:
    s = report.summary
    states = ", ".join(f"{n} {p}" for p, n in s.by_phase if n)
    parts = [f"{plural(s.shards, 'shard')} ({states or 'none'})"]
    parts.append(f"{s.checkpoints} with a checkpoint")
    if s.max_millis_behind_latest is not None:
        parts.append(f"{s.pending} with records waiting")
    if s.dead_letters is not None:
        parts.append(plural(s.dead_letters, "dead letter"))
    if s.unowned:
        parts.append(f"no owner: {', '.join(s.unowned)}")
    return "; ".join(parts)


def to_table(report: StatusReport) -> str:
    """Header lines, one row per shard, totals, then notes and problems."""
    head = [
        f"job {report.job!r} on stream {report.stream!r} ({report.stream_status}), "
        f"{report.generated_at.isoformat(timespec='seconds')}",
        f"checkpoints: {report.checkpoint_store}    dead letters: {report.dead_letter}",
        _job_lease(report.job_lease, report),
        *_workers(report.workers),
        "",
    ]
    rows = _grid(_rows(report))
    tail = ["", _totals(report)]
    tail += [f"note: {n}" for n in report.notes]
    tail += [f"problem: {p}" for p in report.problems]
    return "\n".join(head + rows + tail)
