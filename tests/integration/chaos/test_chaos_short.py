"""The chaos run, short: 4,000 records, 2 SIGKILLs, one ZooKeeper restart,
Kinesis faults through the proxy, 1% poison records. One run per session
(module fixture); each test checks one promise against its audit.

The full run is ``python bench/chaos.py`` (100,000 records, 5 kills); its
figures are in ``docs/guarantees.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kinesis_spout.testing.chaos import ChaosPlan, ChaosResult, figures_json, run_chaos

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
