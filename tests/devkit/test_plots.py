"""devkit.plots: a bench's chart as data, resolved against its figures, drawn
into a PNG on the Agg canvas; and ``--plot`` without matplotlib."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from devkit.plots import (
    PLOTS_EXTRA,
    Bar,
    BarChart,
    Panel,
    PlotError,
    Series,
    add_plot_argument,
    chart_data,
    check_plot_argument,
    draw_bar_chart,
    figure_value,
    finish_bench,
    png_size,
    require_matplotlib,
    save_bench_chart,
    value_label,
)
from devkit.plots.render import GREYS, PALETTE, series_colours

ROOT = Path(__file__).resolve().parents[2]

READERS = (Bar("boto3 loop", "boto3", baseline=True), Bar("spout", "spout"))
CHART = BarChart(
    "bench: {records:,} records",
    (
        Panel("throughput", "records/s", READERS, (Series("", "{}_rps"),)),
        Panel(
            "latency",
            "ms",
            (Bar("file", "file_ms"), Bar("zk", "zk_ms")),
            (Series("p50", "{}_p50"), Series("p99", "{}_p99"), Series("old", "{}_p50_old", True)),
            log=True,
            note="{writes} writes",
        ),
        Panel("cluster", "µs", (Bar("executors", ""),), (Series("", "{}cpu_us"),), optional=True),
    ),
    note="spout / boto3 {ratio:.2f}x",
)
FIGURES = {
    "records": 100_000,
    "boto3_rps": 11_833.0,
    "spout_rps": 14_232,
    "file_ms_p50": 10.1,
    "file_ms_p99": 26.0,
    "file_ms_p50_old": 12.0,
    "zk_ms_p50": 1.13,
    "zk_ms_p99": 15.9,
    "zk_ms_p50_old": None,
    "writes": 8,
    "ratio": 1.2027,
}


# --- figures to chart data (pure) ------------------------------------------------------


def test_figure_value_reads_plain_and_dotted_keys() -> None:
    figures = {"a": 3, "mode": {"clean_rps": 2.5}, "none": None}
    assert figure_value(figures, "a") == 3.0
    assert figure_value(figures, "mode.clean_rps") == 2.5
    assert math.isnan(figure_value(figures, "none"))  # not measured: drawn n/a


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("missing", "figure 'missing' is not among"),
        ("mode.nope", "figure 'mode.nope' is not among"),
        ("a.b", "figure 'a.b' is not among"),
        ("text", "figure 'text' is 'fast', not a finite number"),
        ("flag", "figure 'flag' is True, not a finite number"),
        ("inf", "figure 'inf' is inf, not a finite number"),
    ],
)
def test_figure_value_names_a_missing_or_bad_figure(key: str, message: str) -> None:
    figures = {"a": 1, "mode": {}, "text": "fast", "flag": True, "inf": float("inf")}
    with pytest.raises(PlotError, match=message):
        figure_value(figures, key)


def test_chart_data_reads_every_bar_of_every_series_and_formats_the_notes() -> None:
    data = chart_data(CHART, FIGURES)
    assert data.title == "bench: 100,000 records"
    assert data.note == "spout / boto3 1.20x"
    assert len(data.panels) == 2  # the optional panel's figure is missing: left out
    rps, latency = data.panels
    assert rps.labels == ("boto3 loop", "spout")
    assert [s.values for s in rps.series] == [(11_833.0, 14_232.0)]
    assert rps.series[0].baseline == (True, False)  # the bar's flag
    assert [s.name for s in latency.series] == ["p50", "p99", "old"]
    assert latency.series[1].values == (26.0, 15.9)
    assert latency.series[2].baseline == (True, True)  # the series' flag
    assert math.isnan(latency.series[2].values[1])
    assert latency.log and latency.note == "8 writes"


def test_an_optional_panel_is_drawn_when_its_figures_are_there() -> None:
    data = chart_data(CHART, {**FIGURES, "cpu_us": 1.49})
    assert [p.title for p in data.panels] == ["throughput", "latency", "cluster"]
    assert data.panels[2].series[0].values == (1.49,)


def test_a_missing_figure_of_a_required_panel_or_note_is_named() -> None:
    with pytest.raises(PlotError, match="figure 'zk_ms_p99' is not among"):
        chart_data(CHART, {k: v for k, v in FIGURES.items() if k != "zk_ms_p99"})
    with pytest.raises(PlotError, match="note .*'ratio'"):
        chart_data(CHART, {k: v for k, v in FIGURES.items() if k != "ratio"})
    only_optional = BarChart("t", (CHART.panels[2],))
    with pytest.raises(PlotError, match="no panel has its figures"):
        chart_data(only_optional, FIGURES)


@pytest.mark.parametrize(
    ("value", "label"),
    [(0, "0"), (14_232.4, "14,232"), (26.04, "26.0"), (1.134, "1.13"), (0.0451, "0.0451")],
)
def test_value_labels_have_three_significant_digits(value: float, label: str) -> None:
    assert value_label(value) == label
    assert value_label(math.nan) == "n/a"


def test_own_series_take_the_palette_and_baselines_the_greys_in_order() -> None:
    latency = chart_data(CHART, FIGURES).panels[1]
    assert series_colours(latency) == [
        (PALETTE[0], GREYS[0]),
        (PALETTE[1], GREYS[0]),
        (PALETTE[2], GREYS[0]),  # the baseline series: drawn GREYS[0] (all its bars)
    ]


# --- drawing ---------------------------------------------------------------------------


def test_draws_a_png_of_the_charts_size(tmp_path: Path) -> None:
    one = BarChart("one panel", (CHART.panels[0],))
    small = draw_bar_chart(chart_data(one, FIGURES), tmp_path / "one.png")
    wide = draw_bar_chart(chart_data(CHART, {**FIGURES, "cpu_us": 1.0}), tmp_path / "w.PNG")
    assert png_size(small) == (700, 500)
    assert png_size(wide) == (1390, 500)  # three panels side by side
    for path in (small, wide):
        assert 5_000 < path.stat().st_size < 300_000


def test_png_size_refuses_a_file_that_is_not_a_png(tmp_path: Path) -> None:
    fake = tmp_path / "x.png"
    fake.write_bytes(b"GIF89a" + bytes(40))
    with pytest.raises(PlotError, match="is not a PNG file"):
        png_size(fake)


def test_save_bench_chart_reports_the_file_and_survives_a_missing_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    said: list[str] = []
    assert save_bench_chart(CHART, FIGURES, tmp_path / "c.png", said.append)
    kb = (tmp_path / "c.png").stat().st_size / 1024
    assert said == [f"chart: {tmp_path / 'c.png'} (960 x 500 px, {kb:.0f} KB)"]
    assert save_bench_chart(CHART, FIGURES, None, said.append) and len(said) == 1
    assert not save_bench_chart(CHART, {"records": 1}, tmp_path / "d.png", said.append)
    assert "chart not drawn: figure 'boto3_rps'" in capsys.readouterr().err
    assert not (tmp_path / "d.png").exists()


def test_finish_bench_prints_the_json_last_and_exits_1_only_when_the_chart_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    said: list[str] = []
    figures = dict(reversed(FIGURES.items()))  # not in sorted order
    assert finish_bench(CHART, figures, tmp_path / "c.png", True, say=said.append) == 0
    assert said[0].startswith("chart: ") and json.loads(said[-1]) == figures
    assert list(json.loads(said[-1])) == list(figures)  # the bench's key order
    said.clear()
    assert finish_bench(CHART, figures, None, True, sort_keys=True, say=said.append) == 0
    assert len(said) == 1 and list(json.loads(said[0])) == sorted(figures)
    said.clear()
    assert finish_bench(CHART, figures, None, False, say=said.append) == 0 and not said
    broken = {"records": 1}
    assert finish_bench(CHART, broken, tmp_path / "d.png", True, say=said.append) == 1
    assert said == ['{"records": 1}']  # the figures are printed all the same
    assert "chart not drawn" in capsys.readouterr().err


# --- the --plot option -----------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bench")
    add_plot_argument(parser)
    return parser


@pytest.mark.parametrize(
    ("name", "message"),
    [("chart.svg", "the file name must end in .png"), ("no/such/dir/c.png", "does not exist")],
)
def test_plot_option_refuses_a_bad_file_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, message: str
) -> None:
    parser = _parser()
    args = parser.parse_args(["--plot", str(tmp_path / name)])
    with pytest.raises(SystemExit) as exc:
        check_plot_argument(parser, args.plot)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_plot_option_without_matplotlib_names_the_plots_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = _parser()
    path = tmp_path / "c.png"
    check_plot_argument(parser, parser.parse_args(["--plot", str(path)]).plot)  # installed: ok
    check_plot_argument(parser, parser.parse_args([]).plot)  # no --plot: nothing to check
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    with pytest.raises(PlotError, match=r"needs matplotlib.*'plots' extra"):
        require_matplotlib()
    with pytest.raises(SystemExit) as exc:
        check_plot_argument(parser, parser.parse_args(["--plot", str(path)]).plot)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--plot {path}: drawing charts needs matplotlib" in err
    assert PLOTS_EXTRA in err
    with pytest.raises(PlotError, match="'plots' extra"):
        draw_bar_chart(chart_data(CHART, FIGURES), path)
    assert not path.exists()


BLOCK = (
    "import runpy, sys; sys.modules['matplotlib'] = None; "
    "sys.argv = [sys.argv[1], '--plot', sys.argv[2]]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


@pytest.mark.parametrize(
    "bench",
    [
        "chaos.py",
        "tracker_bench.py",
        "reader_bench.py",
        "checkpoint_bench.py",
        "spark_bench.py",
        "source_bench.py",
    ],
)
def test_each_bench_imports_without_matplotlib_and_refuses_plot_before_it_runs(
    tmp_path: Path, bench: str
) -> None:
    out = tmp_path / "chart.png"
    proc = subprocess.run(
        [sys.executable, "-c", BLOCK, str(ROOT / "bench" / bench), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"--plot {out}: drawing charts needs matplotlib" in proc.stderr
    assert PLOTS_EXTRA in proc.stderr
    assert proc.stdout == ""  # nothing ran: no server started, no figure printed
    assert not out.exists()
