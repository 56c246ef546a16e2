"""Fixtures for the ShellSpout tests: children of ``python -m kinesis_spout.multilang``
started with pipes (killed at teardown) and a pid directory."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kinesis_spout.multilang.testing import ShellSpoutParent, child_command, child_env

Spawn = Callable[..., ShellSpoutParent]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """``spawn(config, *flags)`` starts ``python -m kinesis_spout.multilang`` with pipes."""
    children: list[ShellSpoutParent] = []

    def start(config: Path, *extra: str, timeout: float = 15.0) -> ShellSpoutParent:
        n = len(children)
        child = ShellSpoutParent(
            child_command(sys.executable, config, *extra),
            env=child_env(),
            cwd=tmp_path,
            stderr_path=tmp_path / f"child{n}.stderr",
            timeout=timeout,
        )
        children.append(child.start())
        return child

    yield start
    for child in children:
        child.stop()


@pytest.fixture
def pid_dir(tmp_path: Path) -> Path:
    d = tmp_path / "pids"
    d.mkdir()
    return d
