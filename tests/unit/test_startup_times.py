"""StartupTimes: each phase is the time since the previous mark, said once."""

from __future__ import annotations

import logging

import pytest
from kit import FakeClock

from kinesis_spout.spark.startup import StartupTimes


def test_phases_are_the_times_between_marks_and_the_line_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(10.0)
    times = StartupTimes(started=9.5, clock=clock)
    times.mark("imports")
    clock.now = 12.25
    times.mark("spark session")
    clock.now = 12.5
    with caplog.at_level(logging.DEBUG, logger="kinesis_spout.spark.startup"):
        times.finish("first micro-batch")
        clock.now = 20.0
        times.finish("again")
        times.mark("later")
    assert times.phases == [("imports", 0.5), ("spark session", 2.25), ("first micro-batch", 0.25)]
    assert times.total == 3.0
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "startup: imports 0.50s | spark session 2.25s | first micro-batch 0.25s | total 3.00s"
    ]
