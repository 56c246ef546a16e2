"""``--plot FILE`` for the benches: the option, its check before the bench runs, and the
chart drawn from the bench's figures at the end (with ``--json``'s last line and the exit
code: :func:`finish_bench`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from devkit.plots.bars import BarChart, chart_data
from devkit.plots.errors import PlotError
from devkit.plots.render import draw_bar_chart, png_size, require_matplotlib


def add_plot_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--plot FILE`` (a PNG chart of the run's figures; needs the ``plots`` extra)."""
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help="also draw the run's figures as a PNG chart into FILE "
        "(needs matplotlib: the 'plots' extra)",
    )


def check_plot_argument(parser: argparse.ArgumentParser, path: Path | None) -> None:
    """Before the bench runs: ``--plot FILE`` must name a ``.png`` in an existing directory,
    and matplotlib must import; else ``parser.error`` (exit 2) says what is wrong."""
    if path is None:
        return
    if path.suffix.lower() != ".png":
        parser.error(f"--plot {path}: the file name must end in .png")
    if not path.absolute().parent.is_dir():
        parser.error(f"--plot {path}: directory {path.absolute().parent} does not exist")
    try:
        require_matplotlib()
    except PlotError as exc:
        parser.error(f"--plot {path}: {exc}")


def describe_png(path: Path) -> str:
    """``FILE (W x H px, N KB)``."""
    width, height = png_size(path)
    return f"{path} ({width} x {height} px, {path.stat().st_size / 1024:.0f} KB)"


def save_chart(
    draw: Callable[[Path], object], path: Path | None, say: Callable[[str], None] = print
) -> bool:
    """``draw(path)`` and say where the chart is (nothing when ``path`` is None). False,
    after saying why on stderr, when it cannot be drawn: the bench's figures are still
    printed (a long run is not lost to a chart)."""
    if path is None:
        return True
    try:
        draw(path)
    except PlotError as exc:
        print(f"chart not drawn: {exc}", file=sys.stderr)
        return False
    say(f"chart: {describe_png(path)}")
    return True


def save_bench_chart(
    chart: BarChart,
    figures: Mapping[str, Any],
    path: Path | None,
    say: Callable[[str], None] = print,
) -> bool:
    """:func:`save_chart` of ``chart`` drawn from ``figures``."""
    return save_chart(lambda p: draw_bar_chart(chart_data(chart, figures), p), path, say)


def finish_bench(
    chart: BarChart,
    figures: Mapping[str, Any],
    plot: Path | None,
    as_json: bool,
    *,
    sort_keys: bool = False,
    say: Callable[[str], None] = print,
) -> int:
    """A bench's end: its chart into ``plot`` (``--plot``), then with ``as_json`` (``--json``)
    the figures as one JSON object on the last line. Returns the bench's exit code: 0, or 1
    when the chart could not be drawn (the figures are printed all the same)."""
    drawn = save_bench_chart(chart, figures, plot, say)
    if as_json:
        say(json.dumps(figures, sort_keys=sort_keys))
    sys.stdout.flush()
    return 0 if drawn else 1
