"""Bar charts of a benchmark's figures, as data: what to read from the figures and how to
label it (:class:`BarChart`), resolved against one run's figures into what is drawn
(:class:`ChartData`). Pure: no matplotlib here (see :mod:`.render`).

A bench declares its chart once, e.g.::

    CHART = BarChart(
        "reader_bench: 4 shards, moto server",
        (Panel("read throughput", "records/s",
               bars=(Bar("boto3 loop", "boto3", baseline=True), Bar("spout", "spout")),
               series=(Series("", "{}_rps"),)),),
        note="spout / boto3 loop {ratio_vs_boto3:.2f}x",
    )

and :func:`chart_data` reads ``figures["boto3_rps"]`` and ``figures["spout_rps"]``: each
value's key is the series' ``template`` formatted with the bar's ``key``; a dotted key
(``driver_small.clean_rps``) reads a nested figure. Notes are ``str.format``-ted with the
figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from devkit.plots.errors import PlotError


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar (or one group of bars, one per series) of a panel."""

    label: str
    key: str
    """Formatted into each series' template to give the figure's key."""
    baseline: bool = False
    """A baseline (drawn grey) rather than the project's own figure."""


@dataclass(frozen=True, slots=True)
class Series:
    """One value per bar, read from the figure ``template.format(bar.key)``."""

    name: str
    """Legend entry ("" for a panel of one series: no legend)."""
    template: str = "{}"
    baseline: bool = False


@dataclass(frozen=True, slots=True)
class Panel:
    """One bar chart: bars along x, one value per bar and series."""

    title: str
    ylabel: str
    """The axis label, with the unit (``records/s``, ``ms per write``)."""
    bars: tuple[Bar, ...]
    series: tuple[Series, ...] = (Series(""),)
    log: bool = False
    """A logarithmic value axis (for figures of different magnitudes)."""
    note: str = ""
    optional: bool = False
    """Leave the panel out when one of its figures is missing (a bench option not given)."""


@dataclass(frozen=True, slots=True)
class BarChart:
    """The chart of one bench run: a title and one or more panels side by side."""

    title: str
    panels: tuple[Panel, ...]
    note: str = ""


@dataclass(frozen=True, slots=True)
class SeriesData:
    name: str
    values: tuple[float, ...]
    baseline: tuple[bool, ...]
    """Per bar: drawn as a baseline (the bar's or the series' flag)."""


@dataclass(frozen=True, slots=True)
class PanelData:
    title: str
    ylabel: str
    labels: tuple[str, ...]
    series: tuple[SeriesData, ...]
    log: bool
    note: str


@dataclass(frozen=True, slots=True)
class ChartData:
    """What :func:`~devkit.plots.render.draw_bar_chart` draws."""

    title: str
    note: str
    panels: tuple[PanelData, ...]


def figure_value(figures: Mapping[str, Any], key: str) -> float:
    """``figures[key]`` as a float; a dotted key reads nested mappings; ``None`` (a figure
    the run could not measure) is NaN, drawn as ``n/a``. Raises :class:`PlotError` naming
    the key when it is missing or not a number."""
    value: Any = figures
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise PlotError(f"figure {key!r} is not among the bench's figures")
        value = value[part]
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PlotError(f"figure {key!r} is {value!r}, not a finite number")
    return float(value)


def format_note(note: str, figures: Mapping[str, Any]) -> str:
    """``note`` formatted with the figures (a missing figure is named in the error)."""
    try:
        return note.format(**figures)
    except (KeyError, IndexError, ValueError) as exc:
        raise PlotError(f"note {note!r}: figure {exc} missing or not formattable") from None


def panel_data(panel: Panel, figures: Mapping[str, Any]) -> PanelData:
    """One panel's values and labels, read from ``figures``."""
    if not panel.bars or not panel.series:
        raise PlotError(f"panel {panel.title!r} has no bars or no series")
    series = tuple(
        SeriesData(
            s.name,
            tuple(figure_value(figures, s.template.format(b.key)) for b in panel.bars),
            tuple(s.baseline or b.baseline for b in panel.bars),
        )
        for s in panel.series
    )
    return PanelData(
        panel.title,
        panel.ylabel,
        tuple(b.label for b in panel.bars),
        series,
        panel.log,
        format_note(panel.note, figures),
    )


def chart_data(chart: BarChart, figures: Mapping[str, Any]) -> ChartData:
    """Resolve ``chart`` against one run's ``figures``; optional panels whose figures are
    missing are left out, any other missing figure is a :class:`PlotError`."""
    panels = []
    for panel in chart.panels:
        try:
            panels.append(panel_data(panel, figures))
        except PlotError:
            if not panel.optional:
                raise
    if not panels:
        raise PlotError(f"chart {chart.title!r}: no panel has its figures")
    return ChartData(
        format_note(chart.title, figures), format_note(chart.note, figures), tuple(panels)
    )


def value_label(value: float) -> str:
    """A bar's value as printed above it: three significant digits, thousands separated."""
    if math.isnan(value):
        return "n/a"
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{digits}f}"
