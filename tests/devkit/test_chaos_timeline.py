"""The chaos run's timeline as data (recorder, checkpoint progress, throughput, markers and
spans) and its chart: a small recorded timeline drawn into a PNG."""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit.chaos import (
    ChaosResult,
    CheckpointSeen,
    EventKind,
    Sample,
    Timeline,
    TimelineRecorder,
    chaos_titles,
    checkpoint_points,
    draw_chaos_result,
    draw_timeline,
    throughput,
    timeline_figure,
)
from devkit.chaos.timeline_figure import (
    auto_window,
    checkpoint_lines,
    dead_letter_line,
    starting_spans,
    zookeeper_spans,
)
from devkit.plots import PlotError, png_size

S0, S1 = "shardId-000000000000", "shardId-000000000001"
SEQUENCES = {S0: [10, 20, 30, 40], S1: [15, 25]}


def _seen(shard: str, zxid: int, seq: int | None, at: float, end: bool = False) -> CheckpointSeen:
    return CheckpointSeen(shard, zxid, zxid, seq, 0, end, at, "watch")


def recorded() -> Timeline:
    """Two runs and a kill between them, ZooKeeper down once, two poison records:
    what the run loop records, told the time."""
    rec = TimelineRecorder()
    rec.event(1.0, EventKind.START, "run 1")
    rows = dead = 0
    for step in range(2, 62):  # samples every 0.5 s from 1.0 to 30.5
        at = step / 2
        if 4.0 <= at < 12.0 or 17.0 <= at < 25.0:
            rows += 50  # 100 rows/s while a run is writing
        if at in (6.0, 20.0):
            dead += 1
        rec.sample(at, rows, dead)
        if at == 4.0 or at == 17.0:
            rec.event(at, EventKind.FIRST_ROWS, "run 1" if at == 4.0 else "run 2")
        if at == 12.0:
            rec.event(12.0, EventKind.KILL, "kill 1")
            rec.event(12.3, EventKind.RESTART, "run 2")
    rec.event(30.5, EventKind.DRAINED, "drained")
    rec.event(14.0, EventKind.ZK_STOP)  # recorded late, as the runner does: sorted by time
    rec.event(18.5, EventKind.ZK_START)
    seen = [
        _seen(S0, 5, 20, 7.0),
        _seen(S1, 6, 15, 7.5),
        _seen(S0, 9, 40, 24.0, end=True),
        _seen(S1, 10, 25, 24.5),
    ]
    return rec.timeline(checkpoints=seen, watch_offset=0.5, sequences=SEQUENCES, poison=2)


# --- the recorded data -------------------------------------------------------------------


def test_checkpoint_points_count_the_records_at_or_below_each_stored_value() -> None:
    seen = [
        _seen(S0, 3, 30, 2.0),
        _seen(S0, 1, None, 0.5),
        _seen(S1, 2, 20, 1.0),  # between two sequence numbers: the one below counts
        _seen(S1, 4, 99, 3.0, end=True),
    ]
    points = checkpoint_points(seen, 10.0, {s: sorted(v) for s, v in SEQUENCES.items()})
    assert [(p.at, p.shard_id, p.done, p.total) for p in points] == [
        (10.5, S0, 0, 4),
        (11.0, S1, 1, 2),
        (12.0, S0, 3, 4),
        (13.0, S1, 2, 2),
    ]
    assert [p.percent for p in points] == [0.0, 50.0, 75.0, 100.0]
    with pytest.raises(ValueError, match="shardId-9.*no records put"):
        checkpoint_points([_seen("shardId-9", 1, 5, 0.0)], 0.0, SEQUENCES)


def test_the_recorder_keeps_samples_in_order_and_sorts_events_by_time() -> None:
    tl = recorded()
    assert len(tl.samples) == 60 and tl.samples[0] == Sample(1.0, 0, 0)
    assert tl.samples[-1].rows == 1600 and tl.samples[-1].dead_letters == 2
    assert [e.at for e in tl.events] == sorted(e.at for e in tl.events)
    assert [e.kind for e in tl.of_kind(EventKind.KILL)] == [EventKind.KILL]
    assert tl.shard_records == ((S0, 4), (S1, 2)) and tl.shards == (S0, S1)
    assert [(p.at, p.done) for p in tl.checkpoints] == [(7.5, 2), (8.0, 1), (24.5, 4), (25.0, 2)]
    assert tl.poison == 2


# --- what the chart draws ----------------------------------------------------------------


def test_throughput_is_rows_per_second_over_stretches_of_the_window() -> None:
    samples = [Sample(t / 2, int(100 * max(0.0, t / 2 - 2)), 0) for t in range(0, 21)]
    points = throughput(samples, 2.0)
    assert points == (
        (0.0, 0.0),
        (2.0, 100.0),
        (4.0, 100.0),
        (6.0, 100.0),
        (8.0, 100.0),
        (10.0, 100.0),
    )
    assert throughput(samples[:1], 2.0) == ()
    with pytest.raises(ValueError, match="window must be > 0"):
        throughput(samples, 0)
    assert auto_window(samples) == 2.0
    assert auto_window([Sample(0, 0, 0), Sample(400, 0, 0)]) == 10.0


def test_checkpoint_lines_start_at_zero_and_hold_their_last_value_to_the_end() -> None:
    tl = recorded()
    lines = checkpoint_lines(tl, 1.0, 30.5)
    assert [line.label for line in lines] == ["shard 0 (4 records)", "shard 1 (2 records)"]
    assert lines[0].points == ((1.0, 0.0), (7.5, 50.0), (24.5, 100.0), (30.5, 100.0))
    assert lines[1].points == ((1.0, 0.0), (8.0, 50.0), (25.0, 100.0), (30.5, 100.0))


def test_dead_letter_line_has_a_point_where_the_count_changes() -> None:
    points = dead_letter_line(recorded().samples)
    assert points == ((1.0, 0.0), (6.0, 1.0), (20.0, 2.0), (30.5, 2.0))


def test_kills_and_restarts_are_in_the_data_passed_to_the_drawing() -> None:
    fig = timeline_figure(recorded(), "t", "s")
    assert [(m.at, m.kind, m.label) for m in fig.markers] == [
        (12.0, EventKind.KILL, "kill 1"),
        (12.3, EventKind.RESTART, "run 2"),
        (30.5, EventKind.DRAINED, "drained"),
    ]
    assert [(s.start, s.end, s.kind, s.label) for s in fig.spans] == [
        (14.0, 18.5, "zookeeper", "ZooKeeper down"),
        (1.0, 4.0, "starting", "run 1 starting"),
        (12.3, 17.0, "starting", "run 2 starting"),
    ]
    assert fig.x_range == (1.0, 30.5) and fig.window == 2.0 and fig.poison == 2
    assert max(v for _, v in fig.throughput.points) == pytest.approx(100.0)
    assert fig.dead_letters.points[-1] == (30.5, 2.0)
    assert [line.points[-1][1] for line in fig.checkpoints] == [100.0, 100.0]


def test_spans_need_their_closing_event() -> None:
    rec = TimelineRecorder()
    rec.event(1.0, EventKind.START, "run 1")  # never wrote: no starting span
    rec.event(5.0, EventKind.ZK_STOP)  # never came back: an empty span at the stop
    tl = rec.timeline(sequences={})
    assert starting_spans(tl) == ()
    assert [(s.start, s.end) for s in zookeeper_spans(tl)] == [(5.0, 5.0)]
    with pytest.raises(ValueError, match="needs 2 samples or more, it has 0"):
        timeline_figure(tl)


FIGURES = {
    "records": 4_000,
    "shards": 4,
    "kills": 2,
    "zk_restarts": 1,
    "faults": {"rate": 0.123},
    "read_on": "executors",
    "lost": 0,
    "duplicates": 1_477,
    "duplicate_bound": 800,
    "dead_lettered": 40,
    "poison": 40,
    "checkpoints_monotonic": True,
    "guarantees_held": False,
}


def test_titles_say_what_the_run_did_and_what_the_audit_found() -> None:
    title, subtitle = chaos_titles(FIGURES)
    assert title == (
        "Chaos run: 4,000 records in 4 shards, 2 SIGKILLs, 1 ZooKeeper restart, "
        "12% of Kinesis calls faulted"
    )
    assert subtitle == (
        "executors reads | lost 0 | duplicates 1,477 (bound 800) | poison dead-lettered 40 of "
        "40 | checkpoints monotonic: yes | GUARANTEES BROKEN"
    )


# --- drawing -----------------------------------------------------------------------------


def test_draws_the_recorded_timeline_into_a_png(tmp_path: Path) -> None:
    path = draw_timeline(timeline_figure(recorded(), *chaos_titles(FIGURES)), tmp_path / "t.png")
    assert png_size(path) == (1100, 850)
    assert 20_000 < path.stat().st_size < 200_000
    result = ChaosResult(dict(FIGURES), timeline=recorded())
    again = draw_chaos_result(result, tmp_path / "r.png")
    assert png_size(again) == (1100, 850)
    assert 20_000 < again.stat().st_size < 200_000


def test_a_result_without_a_timeline_or_a_bad_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlotError, match="no timeline"):
        draw_chaos_result(ChaosResult(dict(FIGURES)), tmp_path / "r.png")
    with pytest.raises(PlotError, match="must end in .png"):
        draw_chaos_result(ChaosResult(dict(FIGURES), timeline=recorded()), tmp_path / "r.jpg")
    assert list(tmp_path.iterdir()) == []
