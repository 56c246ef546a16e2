"""The chaos report: the audit of a run's facts as figures (what ``--json`` prints), broken
guarantees and missed criteria."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from devkit.chaos.auditor import (
    DeadLetter,
    KillSnapshot,
    ReplayReport,
    SinkRow,
    Tally,
    replay_windows,
    tally,
)
from devkit.chaos.plan import ChaosPlan, ChaosRecords
from devkit.chaos.timeline import Timeline
from devkit.chaos.watch import CheckpointSeen, MonotonicReport
from devkit.faultproxy import InjectedFaults


@dataclass(slots=True)
class ChaosResult:
    """Figures of a chaos run (:attr:`figures` is what ``--json`` prints)."""

    figures: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    """Broken guarantees: loss, duplicates unexplained or beyond
    ``kills x max_in_flight x shards``, poison mishandled, checkpoints going
    back, or a run that did not go as planned."""
    missed: list[str] = field(default_factory=list)
    """The issue's criterion beyond the guarantee that the run did not meet: each
    poison record dead-lettered exactly once (a replay may dead-letter it again)."""

    timeline: Timeline | None = None
    """The run over time (what ``bench/chaos.py --plot`` draws)."""

    @property
    def guarantees_held(self) -> bool:
        return not self.problems

    @property
    def ok(self) -> bool:
        return not self.problems and not self.missed


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What a chaos run did and left behind: the auditor's input."""

    records: ChaosRecords
    last_seq: Mapping[str, int]
    """The last sequence number put per shard."""
    final: Mapping[str, CheckpointSeen]
    """The stored checkpoints at the end."""
    monotonic: MonotonicReport
    rows: Sequence[SinkRow]
    dead_letters: tuple[list[DeadLetter], list[str]]
    """The dead-letter entries and the lines that could not be read."""
    kills: Sequence[KillSnapshot]
    zk_unreachable: Sequence[float]
    runs: int
    failures: Sequence[str]
    drain_reruns: int
    faults: InjectedFaults
    requests: int
    """Kinesis calls through the fault proxy."""
    timeline: Timeline | None = None
    """Throughput, checkpoints and events over time (for ``bench/chaos.py --plot``)."""
    kinesis_records: int = 0
    """Kinesis records put (fewer than the records with ``--kpl``: aggregates; more for
    its empty aggregates)."""


def build_result(plan: ChaosPlan, facts: RunFacts, phases: dict[str, float]) -> ChaosResult:
    """Audit ``facts`` against ``plan``: the figures, broken guarantees and missed criteria."""
    dead, bad_lines = facts.dead_letters
    counts = tally(
        facts.records.ids,
        facts.records.failing,
        (r.rid for r in facts.rows),
        ((d.rid, d.error, d.attempts) for d in dead),
        plan.retry_limit,
        facts.records.killers,
    )
    replay = replay_windows(facts.kills, facts.rows, dead)
    figures = _figures(plan, facts, counts, replay, len(bad_lines))
    figures.update(_run_figures(plan, facts, replay, phases))
    result = ChaosResult(
        figures,
        _problems(plan, figures, counts, facts.monotonic, bad_lines, facts.last_seq, facts.final),
        _missed(figures),
        facts.timeline,
    )
    figures["guarantees_held"] = result.guarantees_held
    figures["ok"] = result.ok
    return result


def _figures(
    plan: ChaosPlan, facts: RunFacts, counts: Tally, replay: ReplayReport, bad_lines: int
) -> dict[str, Any]:
    """The audit's counts: loss, duplicates, replay windows, poison, checkpoints."""
    final_ok = {s: v.sequence for s, v in facts.final.items()} == dict(facts.last_seq)
    return {
        "records": plan.records,
        "shards": plan.shards,
        "read_on": plan.read_on,
        "processing": plan.processing,
        "seed": plan.seed,
        "kpl": plan.kpl,
        "kinesis_records": facts.kinesis_records,
        "kill_worker_records": len(facts.records.killers),
        "lost": counts.lost,
        "duplicates": counts.duplicates,
        "kills": len(facts.kills),
        "max_in_flight": plan.max_in_flight,
        "duplicate_bound": len(facts.kills) * plan.max_in_flight * plan.shards,
        "replay_window": replay.total,
        "replay_window_max_per_shard": replay.max_per_shard,
        "unexplained_duplicates": replay.unexplained_duplicates,
        "poison": counts.poison,
        "dead_lettered": counts.dead_lettered,
        "dead_letter_entries": counts.dead_letter_entries,
        "dead_letter_duplicates": counts.dead_letter_duplicates,
        "unexplained_dead_letter_duplicates": replay.unexplained_dead_letter_duplicates,
        "bad_dead_letter_entries": counts.bad_dead_letter_entries + bad_lines,
        "poison_in_output": counts.poison_in_output,
        "unexpected_dead_letters": counts.unexpected_dead_letters,
        "unknown_ids": counts.unknown_ids,
        "checkpoints_monotonic": facts.monotonic.monotonic,
        "checkpoint_values_seen": facts.monotonic.values_seen,
        "final_checkpoints_at_end": final_ok,
    }


def _run_figures(
    plan: ChaosPlan, facts: RunFacts, replay: ReplayReport, phases: dict[str, float]
) -> dict[str, Any]:
    """How the run went: restarts, faults injected, job runs, settings, kills and timings."""
    faults, requests = facts.faults, facts.requests
    return {
        "zk_restarts": len(facts.zk_unreachable),
        "zk_unreachable_seconds": list(facts.zk_unreachable),
        "kinesis_calls": requests,
        "faults": {
            "throttle": faults.throttle,
            "error": faults.error,
            "drop": faults.drop_before + faults.drop_after,
            "expire": faults.expire,
            "rate": round(faults.total / requests, 3) if requests else 0.0,
        },
        "job_runs": facts.runs,
        "job_failures": len(facts.failures),
        "job_failure_messages": list(facts.failures),
        "drain_reruns": facts.drain_reruns,
        "retry_limit": plan.retry_limit,
        "batch_size": plan.batch_size,
        "records_per_call": plan.records_per_call,
        "checkpoint_interval": plan.checkpoint_interval,
        "kill_log": [
            {"at": s.at, "rows": s.rows, "window": w, "largest_shard_window": m}
            for s, w, m in zip(facts.kills, replay.windows, replay.shard_max, strict=True)
        ],
        "seconds": phases["total"],
        "phases": phases,
    }


def _missed(f: Mapping[str, Any]) -> list[str]:
    """The issue's criteria beyond the guarantees (see :attr:`ChaosResult.missed`)."""
    out = []
    if f["dead_letter_duplicates"]:
        out.append(
            f"{f['dead_letter_duplicates']} poison records dead-lettered again after a kill "
            "(each should be dead-lettered once)"
        )
    return out


def _problems(
    plan: ChaosPlan,
    f: Mapping[str, Any],
    counts: Tally,
    monotonic: MonotonicReport,
    bad_lines: Sequence[str],
    last_seq: Mapping[str, int],
    final: Mapping[str, CheckpointSeen],
) -> list[str]:
    """Every check of the audit that failed, as a sentence."""
    out: list[str] = []
    if counts.lost:
        out.append(f"{counts.lost} records lost, e.g. {', '.join(counts.lost_sample)}")
    if counts.unknown_ids:
        out.append(f"{counts.unknown_ids} ids in the output that were never put")
    if f["unexplained_duplicates"]:
        out.append(f"{f['unexplained_duplicates']} duplicates outside every kill's replay window")
    if f["duplicates"] > f["duplicate_bound"]:
        out.append(
            f"{f['duplicates']} duplicates > kills x max_in_flight x shards "
            f"= {f['duplicate_bound']}"
        )
    if f["replay_window_max_per_shard"] > plan.max_in_flight:
        out.append(
            f"a kill replayed {f['replay_window_max_per_shard']} records of one shard "
            f"> max_in_flight {plan.max_in_flight}"
        )
    if counts.dead_lettered != counts.poison:
        out.append(f"{counts.dead_lettered} of {counts.poison} poison records dead-lettered")
    if counts.poison_in_output:
        out.append(f"{counts.poison_in_output} poison records in the sink")
    if counts.unexpected_dead_letters:
        out.append(f"{counts.unexpected_dead_letters} good records dead-lettered")
    if f["bad_dead_letter_entries"]:
        out.append(
            f"{f['bad_dead_letter_entries']} dead-letter entries without the record's error "
            f"or with attempts != {plan.retry_limit + 1}: {list(bad_lines)[:3]}"
        )
    if f["unexplained_dead_letter_duplicates"]:
        out.append(
            f"{f['unexplained_dead_letter_duplicates']} dead-letter repeats outside every "
            "kill's replay window"
        )
    if not monotonic.monotonic:
        out.append("checkpoint went backwards: " + "; ".join(monotonic.violations[:5]))
    if not f["final_checkpoints_at_end"]:
        got = {s: v.sequence for s, v in final.items()}
        out.append(f"final checkpoints {got} != last sequence numbers {dict(last_seq)}")
    if f["kills"] != plan.kills:
        out.append(f"{f['kills']} kills done, {plan.kills} planned")
    if f["zk_restarts"] != plan.zk_restarts:
        out.append(f"{f['zk_restarts']} ZooKeeper restarts done, {plan.zk_restarts} planned")
    return out


def figures_json(result: ChaosResult) -> str:
    """The figures as one JSON line."""
    return json.dumps(result.figures, separators=(", ", ": "))
