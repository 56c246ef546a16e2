"""Drawing with matplotlib, imported lazily: the library and the benches import this module
without matplotlib installed; only drawing needs it (the ``plots`` extra).

Figures are drawn on matplotlib's non-interactive Agg canvas (no screen, no pyplot state).
"""

from __future__ import annotations

import math
import struct
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from devkit.plots.bars import ChartData, PanelData, value_label
from devkit.plots.errors import PLOTS_EXTRA, PlotError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PALETTE = ("#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")
"""The project's own figures, one colour per series."""
GREYS = ("#9e9e9e", "#616161", "#c7c7c7", "#424242")
"""Baselines."""
DPI = 100
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def require_matplotlib() -> None:
    """Raise :class:`PlotError` naming the ``plots`` extra when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise PlotError(
            f"drawing charts needs matplotlib, which cannot be imported ({exc}); "
            f"install the 'plots' extra: {PLOTS_EXTRA}"
        ) from None


def new_figure(width: float, height: float) -> Figure:
    """An empty figure of ``width`` x ``height`` inches on an Agg canvas."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG to ``path``; returns the path."""
    out = Path(path)
    if out.suffix.lower() != ".png":
        raise PlotError(f"chart file {str(out)!r}: the name must end in .png")
    try:
        fig.savefig(out, format="png", dpi=DPI)
    except OSError as exc:
        raise PlotError(f"cannot write the chart to {str(out)!r}: {exc}") from exc
    return out


def png_size(path: str | Path) -> tuple[int, int]:
    """Width and height in pixels, from the PNG header; :class:`PlotError` if not a PNG."""
    head = Path(path).read_bytes()[:24]
    if len(head) < 24 or head[:8] != _PNG_SIGNATURE or head[12:16] != b"IHDR":
        raise PlotError(f"{str(path)!r} is not a PNG file")
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def draw_bar_chart(data: ChartData, path: str | Path) -> Path:
    """One PNG: the chart's panels side by side, values printed on the bars."""
    n = len(data.panels)
    width = max(7.0, 1.0 + 4.3 * n)
    fig = new_figure(width, 5.0)
    axes = fig.subplots(1, n, squeeze=False)[0]
    for ax, panel in zip(axes, data.panels, strict=True):
        _draw_panel(ax, panel)
    fig.suptitle(textwrap.fill(data.title, int(width * 8.5)), fontsize=13, fontweight="bold")
    if data.note:
        fig.supxlabel(textwrap.fill(data.note, int(width * 14)), fontsize=9, color="#424242")
    return save_png(fig, path)


def series_colours(panel: PanelData) -> list[tuple[str, str]]:
    """Per series: its colour for the project's bars and for baseline bars. Own series take
    the palette in order, baselines the greys in order."""
    out = []
    own = base = 0
    for series in panel.series:
        out.append((PALETTE[own % len(PALETTE)], GREYS[base % len(GREYS)]))
        if all(series.baseline):
            base += 1
        else:
            own += 1
    return out


def _draw_panel(ax: Axes, panel: PanelData) -> None:
    count = len(panel.series)
    width = 0.8 / count
    colours_of = series_colours(panel)
    for i, (series, (mine, theirs)) in enumerate(zip(panel.series, colours_of, strict=True)):
        xs = [j + (i - (count - 1) / 2) * width for j in range(len(panel.labels))]
        colours = [theirs if base else mine for base in series.baseline]
        heights = [0.0 if math.isnan(v) else v for v in series.values]  # n/a: no bar, a label
        bars = ax.bar(xs, heights, width * 0.92, color=colours, label=series.name or None)
        ax.bar_label(bars, [value_label(v) for v in series.values], fontsize=8, padding=2)
    wrap = max(6, 56 // len(panel.labels))  # characters per line under a bar
    ax.set_xticks(range(len(panel.labels)), [textwrap.fill(x, wrap) for x in panel.labels])
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title(panel.title, fontsize=11)
    ax.set_ylabel(panel.ylabel)
    if panel.note:
        ax.set_xlabel(textwrap.fill(panel.note, 60), fontsize=8)
    _value_axis(ax, panel.log)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    _legend(ax, panel)


def _value_axis(ax: Axes, log: bool) -> None:
    """Room above the bars for their labels; plain numbers (``1,000``, ``0.5``) on the axis."""
    from matplotlib.ticker import FuncFormatter

    if log:
        ax.set_yscale("log")
        low, high = ax.get_ylim()
        ax.set_ylim(low, high * 3)
    else:
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: tick_label(v)))


def tick_label(value: float) -> str:
    """An axis tick: ``17,500``, ``2.5``, ``0.01`` (no exponents, no mathtext)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:g}"


def _legend(ax: Axes, panel: PanelData) -> None:
    from matplotlib.patches import Patch

    if len(panel.series) > 1:
        handles = [
            Patch(color=theirs if all(s.baseline) else mine)
            for s, (mine, theirs) in zip(panel.series, series_colours(panel), strict=True)
        ]
        ax.legend(handles, [s.name for s in panel.series], fontsize=8)
    elif any(panel.series[0].baseline) and not all(panel.series[0].baseline):
        handles = [Patch(color=PALETTE[0]), Patch(color=GREYS[0])]
        ax.legend(handles, ["kinesis-spout", "baseline"], fontsize=8)
