"""The chaos run, short: 4,000 records, 2 SIGKILLs, one ZooKeeper restart,
Kinesis faults through the proxy, 1% poison records. One run per session
(module fixture); each test checks one promise against its audit.

The full run is ``python bench/chaos.py`` (100,000 records, 5 kills); its
figures are in ``docs/guarantees.md``. The last test draws this run's timeline
the way ``bench/chaos.py --plot FILE`` does.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from devkit.chaos import (
    ChaosPlan,
    ChaosResult,
    EventKind,
    chaos_titles,
    figures_json,
    run_chaos,
    timeline_figure,
)
from devkit.plots import png_size

BENCH_CHAOS = Path(__file__).resolve().parents[3] / "bench" / "chaos.py"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.timeout(420),
]

PLAN = ChaosPlan(
    records=4_000,
    kills=2,
    seed=7,
    records_per_call=100,
    batch_size=400,
    max_in_flight=100,
    checkpoint_interval=0.5,
    zk_down_seconds=3.0,
    kill_jitter=0.5,
    timeout=360.0,
)


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> ChaosResult:
    workdir: Path = tmp_path_factory.mktemp("chaos")
    result = run_chaos(PLAN, workdir)
    print(figures_json(result))
    return result


@pytest.fixture(scope="module")
def figures(chaos: ChaosResult) -> dict[str, Any]:
    return chaos.figures


def test_the_chaos_happened(figures: dict[str, Any]) -> None:
    assert figures["kills"] == 2 and figures["job_runs"] >= 3
    assert figures["zk_restarts"] == 1
    faults = figures["faults"]
    assert faults["throttle"] + faults["error"] + faults["drop"] > 0
    assert figures["poison"] == 40


def test_nothing_is_lost(figures: dict[str, Any]) -> None:
    assert figures["lost"] == 0
    assert figures["unknown_ids"] == 0


def test_every_duplicate_comes_from_a_kills_replay_window(figures: dict[str, Any]) -> None:
    # The kills did replay something (else this test could not fail) ...
    assert figures["duplicates"] > 0
    # ... and nothing was written twice except records after the checkpoint
    # stored at a kill: no redelivery of acked records, no checkpoint ahead of the sink.
    assert figures["unexplained_duplicates"] == 0
    assert figures["duplicates"] <= figures["replay_window"]
    assert figures["unexplained_dead_letter_duplicates"] == 0


def test_poison_records_are_dead_lettered_with_their_error_and_never_processed(
    figures: dict[str, Any],
) -> None:
    assert figures["dead_lettered"] == figures["poison"]
    assert figures["bad_dead_letter_entries"] == 0  # error names the id; retry_limit + 1 attempts
    assert figures["poison_in_output"] == 0
    assert figures["unexpected_dead_letters"] == 0


def test_checkpoints_only_move_forward_and_end_at_each_shards_last_record(
    figures: dict[str, Any],
) -> None:
    assert figures["checkpoints_monotonic"]
    assert figures["checkpoint_values_seen"] >= 4  # at least one per shard
    assert figures["final_checkpoints_at_end"]


def test_duplicates_within_kills_x_max_in_flight_x_shards(figures: dict[str, Any]) -> None:
    # A shard hands out at most max_in_flight records after its saved checkpoint,
    # so one kill replays at most that many records of one shard.
    assert figures["replay_window_max_per_shard"] <= figures["max_in_flight"]
    assert figures["duplicates"] <= figures["duplicate_bound"] == 2 * 100 * 4


def test_the_run_over_time_is_recorded_and_drawn_as_bench_chaos_plot_does(
    chaos: ChaosResult, figures: dict[str, Any], tmp_path: Path
) -> None:
    timeline = chaos.timeline
    assert timeline is not None
    data = timeline_figure(timeline, *chaos_titles(figures))
    kills = [m for m in data.markers if m.kind is EventKind.KILL]
    restarts = [m for m in data.markers if m.kind is EventKind.RESTART]
    assert [m.label for m in kills] == ["kill 1", "kill 2"]
    for marker, logged in zip(kills, figures["kill_log"], strict=True):
        assert marker.at <= logged["at"] + 0.05  # the SIGKILL, then the snapshot of the log
    assert len(restarts) == figures["job_runs"] - 1
    for kill in kills:  # each kill is followed at once by a restart
        assert any(0 <= r.at - kill.at < 60 for r in restarts)
    (zk,) = [s for s in data.spans if s.kind == "zookeeper"]
    assert zk.end - zk.start == pytest.approx(figures["zk_unreachable_seconds"][0], abs=0.2)
    starting = [s for s in data.spans if s.kind == "starting"]
    assert len(starting) >= 3  # the first run and the run after each kill wrote rows
    # The samples saw every sink row and dead letter; every shard's checkpoint reached its end.
    last = timeline.samples[-1]
    assert last.rows == figures["records"] - figures["poison"] + figures["duplicates"]
    assert data.dead_letters.points[-1][1] == figures["dead_letter_entries"]
    assert [line.points[-1][1] for line in data.checkpoints] == [100.0] * figures["shards"]
    assert max(v for _, v in data.throughput.points) > 0

    spec = importlib.util.spec_from_file_location("bench_chaos", BENCH_CHAOS)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    path = tmp_path / "chaos.png"
    assert bench.plot_result(chaos, path)
    assert png_size(path) == (1100, 850)
    assert 20_000 < path.stat().st_size < 300_000
