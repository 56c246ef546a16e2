"""PNG charts of the benches' figures and of the chaos run (``--plot FILE``).

matplotlib is optional (the ``plots`` extra) and imported only when a chart is drawn, on
the non-interactive Agg canvas. Modules: ``bars`` (a bench's chart as data, resolved
against its figures: pure), ``render`` (drawing and PNG files), ``cli`` (the ``--plot``
option of every bench: checked before the bench runs, drawn at its end, then the
``--json`` line and the exit code).
"""

from __future__ import annotations

from devkit.plots.bars import (
    Bar,
    BarChart,
    ChartData,
    Panel,
    PanelData,
    Series,
    SeriesData,
    chart_data,
    figure_value,
    format_note,
    value_label,
)
from devkit.plots.cli import (
    add_plot_argument,
    check_plot_argument,
    describe_png,
    finish_bench,
    save_bench_chart,
    save_chart,
)
from devkit.plots.errors import PLOTS_EXTRA, PlotError
from devkit.plots.render import (
    draw_bar_chart,
    new_figure,
    png_size,
    require_matplotlib,
    save_png,
)

__all__ = [
    "PLOTS_EXTRA",
    "Bar",
    "BarChart",
    "ChartData",
    "Panel",
    "PanelData",
    "PlotError",
    "Series",
    "SeriesData",
    "add_plot_argument",
    "chart_data",
    "check_plot_argument",
    "describe_png",
    "draw_bar_chart",
    "figure_value",
    "finish_bench",
    "format_note",
    "new_figure",
    "png_size",
    "require_matplotlib",
    "save_bench_chart",
    "save_chart",
    "save_png",
    "value_label",
]
