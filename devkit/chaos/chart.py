"""Draws a chaos run's :class:`~.timeline_figure.TimelineFigure` into a PNG (matplotlib,
imported lazily through :mod:`devkit.plots`; the Agg canvas)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from devkit.chaos.timeline import EventKind
from devkit.chaos.timeline_figure import (
    Line,
    TimelineFigure,
    chaos_titles,
    timeline_figure,
)
from devkit.plots.errors import PlotError
from devkit.plots.render import PALETTE, new_figure, save_png, tick_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from devkit.chaos.report import ChaosResult

STYLE: dict[EventKind, tuple[str, str, str]] = {
    EventKind.KILL: ("#d62728", "--", "SIGKILL of the job"),
    EventKind.RESTART: ("#2ca02c", ":", "job started again"),
    EventKind.FAILURE: ("#ff7f0e", "-.", "job failed on its own"),
    EventKind.DRAINED: ("#424242", "-", "last run drained and stopped"),
}
"""Per marked event: colour, line style, legend entry."""
SPAN_STYLE = {
    "zookeeper": ("#7f7f7f", 0.22, "ZooKeeper stopped"),
    "starting": ("#2ca02c", 0.08, "job starting (launched, no rows yet)"),
}
"""Per span kind: colour, opacity, legend entry."""


def draw_timeline(data: TimelineFigure, path: str | Path) -> Path:
    """Three panels over one time axis (throughput, checkpoint progress per shard, dead
    letters), kills and restarts as vertical lines, ZooKeeper's outages shaded."""
    fig = new_figure(11.0, 8.5)
    from matplotlib.ticker import FuncFormatter

    top, mid, low = fig.subplots(3, 1, sharex=True, height_ratios=(3, 3, 2))
    _steps(top, data.throughput, PALETTE[0], fill=True)
    top.set_ylabel("sink rows / s")
    top.set_title(data.subtitle, fontsize=9)
    for i, line in enumerate(data.checkpoints):
        _steps(mid, line, PALETTE[i % len(PALETTE)])
    mid.set_ylabel("checkpoint\n(% of the shard's records)")
    mid.set_ylim(0, 105)
    mid.legend(loc="lower right", fontsize=8)
    _steps(low, data.dead_letters, "#9467bd")
    if data.poison:
        low.axhline(data.poison, color="#9467bd", ls="--", lw=0.8, alpha=0.6)
        low.annotate(
            f"poison records put: {data.poison:,}",
            (data.x_range[0], data.poison),
            xytext=(4, -12),
            textcoords="offset points",
            fontsize=8,
            color="#9467bd",
        )
    low.set_ylabel("dead-letter entries\n(cumulative)")
    low.set_ylim(0, max(data.poison, *(v for _, v in data.dead_letters.points), 1) * 1.25)
    low.set_xlabel("seconds since the chaos run started (servers up, records put, then the job)")
    for ax in (top, mid, low):
        _events(ax, data)
        ax.grid(alpha=0.3)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: tick_label(v)))
    top.set_xlim(data.x_range[0] - 1, data.x_range[1] + 1)
    _label_markers(top, data)
    _legend(fig, data)
    fig.suptitle(data.title, fontsize=12, fontweight="bold")
    return save_png(fig, path)


def _steps(ax: Axes, line: Line, colour: str, fill: bool = False) -> None:
    xs = [x for x, _ in line.points]
    ys = [y for _, y in line.points]
    ax.step(xs, ys, where="post", color=colour, lw=1.4, label=line.label)
    if fill:
        ax.fill_between(xs, ys, step="post", color=colour, alpha=0.2)


def _events(ax: Axes, data: TimelineFigure) -> None:
    for span in data.spans:
        colour, alpha, _ = SPAN_STYLE[span.kind]
        ax.axvspan(span.start, span.end, color=colour, alpha=alpha, lw=0)
    for m in data.markers:
        colour, style, _ = STYLE[m.kind]
        ax.axvline(m.at, color=colour, ls=style, lw=1.2)


def _label_markers(ax: Axes, data: TimelineFigure) -> None:
    """Labels along the top of the marker lines, on a white ground: kills and the end left
    of their line, restarts right of it; span labels across their middle."""
    ground = {"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85}
    for m in data.markers:
        left = m.kind in (EventKind.KILL, EventKind.DRAINED)
        kill = m.kind is EventKind.KILL
        ax.annotate(
            m.label,
            (m.at, 0.98),
            xycoords=("data", "axes fraction"),
            xytext=(-3 if left else 3, 0),
            textcoords="offset points",
            ha="right" if left else "left",
            va="top",
            rotation=90,
            fontsize=8 if kill else 7,
            color=STYLE[m.kind][0],
            fontweight="bold" if kill else "normal",
            bbox=ground,
        )
    for span in data.spans:
        ax.annotate(
            span.label,
            ((span.start + span.end) / 2, 0.5),
            xycoords=("data", "axes fraction"),
            ha="center",
            va="center",
            fontsize=7,
            color="#424242",
            bbox=ground,
            rotation=90 if span.kind == "zookeeper" else 0,
        )


def _legend(fig: Figure, data: TimelineFigure) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    kinds = [k for k in STYLE if any(m.kind is k for m in data.markers)]
    handles: list[Line2D | Patch] = [
        Line2D([], [], color=STYLE[k][0], ls=STYLE[k][1], lw=1.2) for k in kinds
    ]
    labels = [STYLE[k][2] for k in kinds]
    for kind, (colour, alpha, label) in SPAN_STYLE.items():
        if any(s.kind == kind for s in data.spans):
            handles.append(Patch(color=colour, alpha=alpha * 1.5))
            labels.append(label)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=len(handles), fontsize=8)


def draw_chaos_result(result: ChaosResult, path: str | Path) -> Path:
    """The chart of a finished chaos run: its timeline, titled with what the run did and
    what the audit found."""
    if result.timeline is None:
        raise PlotError("this chaos result has no timeline to draw")
    title, subtitle = chaos_titles(result.figures)
    return draw_timeline(timeline_figure(result.timeline, title, subtitle), path)
