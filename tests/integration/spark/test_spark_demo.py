"""The README's demo command, run as users run it, twice: the second run resumes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kinesis_spout.examples.wordcount import is_poison, sample_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[3]
SENTENCES = 60


def summary_records(stdout: str) -> int:
    """Deliveries the job handled, from its last line ("stopped (...) ... | X deliveries")."""
    found = re.findall(r"^stopped \(.*\) after \d+ batches: .* \| (\d+) deliveries", stdout, re.M)
    assert found, stdout[-3000:]
    return int(found[-1])


def test_the_demo_command_runs_and_a_second_run_resumes_from_the_checkpoints(
    tmp_path: Path,
) -> None:
    out = tmp_path / "demo-output"
    first = subprocess.run(
        ["bash", "scripts/demo.sh", "--output", str(out), "--sentences", str(SENTENCES)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    text = first.stdout
    assert "kinesis-spout demo, run 1" in text
    assert "checkpoints before this run: none" in text
    assert "every sentence counted exactly once" in text
    assert "dead letters: 1, for the 1 poison records put so far, each dead-lettered once" in text
    assert re.search(r"^batch 0: \d+ records \| ok \d+ \| failed", text, re.M)  # progress lines
    assert str(out / "checkpoints") in text and str(out / "dead-letter") in text
    assert "stopped the emulator" in text
    # the status command's table, every shard caught up at the last record put into it
    assert "status: every shard's checkpoint is at the last record put into it" in text
    assert re.search(r"^shardId-000000000000\s+open\s.*caught up", text, re.M), text[-3000:]
    poison = sum(is_poison(d) for _, d in sample_records(1, SENTENCES))
    # delivered: every record once, each poison record retry_limit (2) more times
    assert summary_records(text) == SENTENCES + 2 * sum(
        is_poison(d) for _, d in sample_records(0, SENTENCES)
    )

    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "kinesis_spout.cli",
            "demo",
            "--output",
            str(out),
            "--sentences",
            str(SENTENCES),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    text = second.stdout
    assert "kinesis-spout demo, run 2" in text
    assert re.search(r"checkpoints before this run:\n\s+shardId-000000000000  done up to", text)
    # only the new chunk was read: nothing of run 1 was processed again
    assert summary_records(text) == SENTENCES + 2 * poison
    assert "every sentence counted exactly once" in text
    assert "each dead-lettered once" in text
