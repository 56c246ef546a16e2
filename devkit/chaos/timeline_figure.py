"""What the chaos chart draws, computed from a :class:`~.timeline.Timeline` (pure):
throughput over time, each shard's checkpoint progress, dead letters so far, the kills and
restarts as vertical markers and ZooKeeper's outages as shaded spans."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from devkit.chaos.timeline import EventKind, Sample, Timeline

Point = tuple[float, float]


@dataclass(frozen=True, slots=True)
class Line:
    """A series drawn as steps: each point's value holds until the next point."""

    label: str
    points: tuple[Point, ...]


@dataclass(frozen=True, slots=True)
class Marker:
    """A vertical line across every panel."""

    at: float
    kind: EventKind
    label: str


@dataclass(frozen=True, slots=True)
class Span:
    """A shaded stretch of time: ZooKeeper stopped, or a run starting (launched, no rows yet)."""

    start: float
    end: float
    label: str
    kind: Literal["zookeeper", "starting"]


@dataclass(frozen=True, slots=True)
class TimelineFigure:
    """The data of the chaos chart: three panels over one time axis, markers across all."""

    title: str
    subtitle: str
    throughput: Line
    """Sink rows written per second."""
    window: float
    """Seconds per throughput step."""
    checkpoints: tuple[Line, ...]
    """Per shard: percent of its records at or below its stored checkpoint."""
    dead_letters: Line
    """Dead-letter entries written so far."""
    poison: int
    markers: tuple[Marker, ...]
    spans: tuple[Span, ...]
    x_range: tuple[float, float]


MARKED = (EventKind.KILL, EventKind.RESTART, EventKind.FAILURE, EventKind.DRAINED)
"""Events drawn as vertical lines (the first start is where the time axis begins)."""


def throughput(samples: Sequence[Sample], window: float) -> tuple[Point, ...]:
    """Sink rows per second over consecutive stretches of at least ``window`` seconds,
    as step points ``(stretch start, rate)``, closed by ``(last end, last rate)``."""
    if window <= 0:
        raise ValueError(f"window must be > 0 seconds, not {window}")
    if len(samples) < 2:
        return ()
    out: list[Point] = []
    start = samples[0]
    for s in samples[1:]:
        if s.at - start.at >= window:
            out.append((start.at, (s.rows - start.rows) / (s.at - start.at)))
            start = s
    if out:
        out.append((start.at, out[-1][1]))
    return tuple(out)


def auto_window(samples: Sequence[Sample]) -> float:
    """About 40 throughput steps over the run, none shorter than 2 s."""
    if len(samples) < 2:
        return 2.0
    return max(2.0, round((samples[-1].at - samples[0].at) / 40, 1))


def checkpoint_lines(timeline: Timeline, x0: float, x1: float) -> tuple[Line, ...]:
    """Per shard, its checkpoint progress in percent: 0 at ``x0`` (nothing stored yet),
    each stored value from when it was seen, held until ``x1``."""
    lines = []
    for shard, total in timeline.shard_records:
        points: list[Point] = [(x0, 0.0)]
        points += [(p.at, p.percent) for p in timeline.checkpoints if p.shard_id == shard]
        points.append((max(x1, points[-1][0]), points[-1][1]))
        lines.append(Line(f"{_short_shard(shard)} ({total:,} records)", tuple(points)))
    return tuple(lines)


def _short_shard(shard_id: str) -> str:
    """``shardId-000000000003`` -> ``shard 3``."""
    tail = shard_id.rsplit("-", 1)[-1]
    return f"shard {int(tail)}" if tail.isdigit() else shard_id


def dead_letter_line(samples: Sequence[Sample]) -> tuple[Point, ...]:
    """Dead letters so far: a point where the count changed, plus the first and last."""
    out: list[Point] = []
    for i, s in enumerate(samples):
        if i in (0, len(samples) - 1) or s.dead_letters != samples[i - 1].dead_letters:
            out.append((s.at, float(s.dead_letters)))
    return tuple(out)


def markers(timeline: Timeline) -> tuple[Marker, ...]:
    """Kills, restarts, failures and the end, labelled (``kill 1``, ``run 2``, ...)."""
    return tuple(
        Marker(e.at, e.kind, e.note or e.kind.value) for e in timeline.events if e.kind in MARKED
    )


def zookeeper_spans(timeline: Timeline) -> tuple[Span, ...]:
    """Each ZooKeeper stop paired with the start after it."""
    spans = []
    starts = [e.at for e in timeline.of_kind(EventKind.ZK_START)]
    for stop in timeline.of_kind(EventKind.ZK_STOP):
        end = min((t for t in starts if t >= stop.at), default=stop.at)
        spans.append(Span(stop.at, end, "ZooKeeper down", "zookeeper"))
    return tuple(spans)


def starting_spans(timeline: Timeline) -> tuple[Span, ...]:
    """From each launch of the job to its first rows in the sink (events of the same run,
    ``run N``): the time a run took to start (Spark, the job lease, the first batch)."""
    spans = []
    launches = timeline.of_kind(EventKind.START) + timeline.of_kind(EventKind.RESTART)
    firsts = timeline.of_kind(EventKind.FIRST_ROWS)
    for launch in launches:
        first = next((e for e in firsts if e.note == launch.note and e.at >= launch.at), None)
        if first is not None:
            spans.append(Span(launch.at, first.at, f"{launch.note} starting", "starting"))
    return tuple(sorted(spans, key=lambda s: s.start))


def timeline_figure(timeline: Timeline, title: str = "", subtitle: str = "") -> TimelineFigure:
    """Everything the chart draws. Raises ValueError for a timeline with fewer than two
    samples (nothing to draw over time)."""
    samples = timeline.samples
    if len(samples) < 2:
        raise ValueError(f"a chaos timeline needs 2 samples or more, it has {len(samples)}")
    x0, x1 = samples[0].at, samples[-1].at
    window = auto_window(samples)
    return TimelineFigure(
        title=title,
        subtitle=subtitle,
        throughput=Line(f"sink rows/s ({window:g} s steps)", throughput(samples, window)),
        window=window,
        checkpoints=checkpoint_lines(timeline, x0, x1),
        dead_letters=Line("dead-letter entries", dead_letter_line(samples)),
        poison=timeline.poison,
        markers=markers(timeline),
        spans=zookeeper_spans(timeline) + starting_spans(timeline),
        x_range=(x0, x1),
    )


def chaos_titles(figures: Mapping[str, Any]) -> tuple[str, str]:
    """The chart's title (what the run did) and subtitle (what the audit found), from the
    figures of :class:`~.report.ChaosResult`."""
    zk = figures["zk_restarts"]
    title = (
        f"Chaos run: {figures['records']:,} records in {figures['shards']} shards, "
        f"{figures['kills']} SIGKILLs, {zk} ZooKeeper restart{'' if zk == 1 else 's'}, "
        f"{figures['faults']['rate']:.0%} of Kinesis calls faulted"
    )
    subtitle = " | ".join(
        (
            f"{figures['read_on']} reads",
            f"lost {figures['lost']}",
            f"duplicates {figures['duplicates']:,} (bound {figures['duplicate_bound']:,})",
            f"poison dead-lettered {figures['dead_lettered']:,} of {figures['poison']:,}",
            f"checkpoints monotonic: {'yes' if figures['checkpoints_monotonic'] else 'NO'}",
            "guarantees held" if figures["guarantees_held"] else "GUARANTEES BROKEN",
        )
    )
    return title, subtitle
