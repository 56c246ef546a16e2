"""Fixtures for the ShellSpout tests: children of ``python -m kinesis_spout.multilang``
started with pipes (killed at teardown), a pid directory and the config file they read."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kinesis_spout.multilang.testing import ShellSpoutParent, child_command, child_env

Spawn = Callable[..., ShellSpoutParent]
WriteConfig = Callable[..., Path]


def _write_config(
    path: Path, stream: str | Sequence[str], endpoint: str, tmp: Path, **extra: Any
) -> Path:
    """A config reading ``stream`` (a name: ``stream_name``; a list: ``streams``), job
    named after the (first) stream, file checkpoints in ``tmp/checkpoints``, dead
    letters in ``tmp/dead``; ``extra`` adds or replaces keys."""
    names = [stream] if isinstance(stream, str) else list(stream)
    values: dict[str, Any] = {
        "job_name": names[0],
        "endpoint_url": endpoint,
        "checkpoint_store": f"file://{tmp / 'checkpoints'}",
        "dead_letter": str(tmp / "dead"),
        "retry_limit": 2,
        "checkpoint_interval": 0.2,
        "empty_shard_backoff": 0.05,
        "max_calls_per_second": 50.0,
    }
    values |= extra
    lines = [
        f'stream_name = "{stream}"'
        if isinstance(stream, str)
        else "streams = [" + ", ".join(f'"{n}"' for n in names) + "]"
    ]
    lines += [f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v!r}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def write_config() -> WriteConfig:
    """``write_config(path, stream or streams, endpoint, tmp, **extra)``: see
    :func:`_write_config`."""
    return _write_config


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
