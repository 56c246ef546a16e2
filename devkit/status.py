"""Running ``kinesis-spout`` commands as users do (the installed command), for tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_command(
    *args: str, cwd: Path | None = None, timeout: float = 120.0, columns: int = 80
) -> subprocess.CompletedProcess[str]:
    """``kinesis-spout ARGS`` in a terminal of ``columns`` (``COLUMNS``), with the
    emulators' credentials, its output captured."""
    command = [str(Path(sys.executable).with_name("kinesis-spout")), *args]
    env = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        **os.environ,
        "COLUMNS": str(columns),
    }
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def run_status(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``kinesis-spout status ARGS``, its output captured."""
    return run_command("status", *args, timeout=timeout)


def status_json(*args: str, timeout: float = 120.0) -> dict[str, Any]:
    """The parsed JSON document of ``kinesis-spout status --json ARGS`` (which must succeed)."""
    proc = run_status("--json", *args, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"status exited {proc.returncode}: {proc.stderr[-3000:]}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def table_rows(text: str) -> dict[str, list[str]]:
    """The shard rows of the status table, by shard id (cells split on blanks)."""
    rows = [line.split() for line in text.splitlines() if line.startswith("shardId-")]
    return {cells[0]: cells for cells in rows}
