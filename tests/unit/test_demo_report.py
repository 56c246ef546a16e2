"""Hole 9: the demo lists every dead letter it counts (it printed "4" and listed 3)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kinesis_spout.examples.demo import _report


def dead(n: int) -> list[dict[str, object]]:
    return [
        {"message_id": f"shardId-000000000000:{i}", "attempts": 3, "error": "ValueError: poison"}
        for i in range(n)
    ]


@pytest.mark.parametrize("n", [1, 4, 10])
def test_every_dead_letter_counted_is_listed(
    n: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    words = Counter({"storm": 2})
    code = _report(tmp_path, f"file://{tmp_path / 'cp'}", words, words, dead(n), n)
    out = capsys.readouterr().out
    assert code == 0
    assert f"dead letters: {n}, for the {n} poison records put so far" in out
    listed = [line for line in out.splitlines() if "after 3 attempts" in line]
    assert len(listed) == n


def test_a_long_list_is_cut_and_says_how_many_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    words = Counter({"storm": 2})
    _report(tmp_path, f"file://{tmp_path / 'cp'}", words, words, dead(25), 25)
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if "after 3 attempts" in line]) == 10
    assert "... and 15 more in" in out
