"""The error of the plotting helpers."""

from __future__ import annotations

from kinesis_spout.errors import KinesisSpoutError

PLOTS_EXTRA = "pip install -e '.[plots]'"
"""How to get matplotlib: the project's ``plots`` extra."""


class PlotError(KinesisSpoutError):
    """A chart cannot be drawn: matplotlib is missing, a figure is missing, or the file is bad."""
