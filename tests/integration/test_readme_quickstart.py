"""The README's quickstart, run as written from a clean virtualenv.

The code blocks of the README's "Quickstart" section are read from the README itself (so
the two cannot drift) and run in order in a directory that holds nothing but a checkout of
this repository as ``./kinesis-spout`` (a copy of this one), as the README says: the shell
block that creates a virtualenv, installs ``./kinesis-spout[demo]`` (the documented line,
verbatim) and starts moto's server; ``job.toml``; the block that creates the stream and
puts the records; ``loop.py``, run until it prints the line the README promises, then
stopped with SIGTERM (exit 0); ``kinesis-spout status`` and ``kinesis-spout dead-letters
list``.

One substitution only: the emulator's port (the README's ``4567``) becomes a free one.
Nothing from the project's own virtualenv is on ``PATH``: every command runs from the new
virtualenv.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import boto3
import pytest

from kinesis_spout.testing.servers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PORT_PLACEHOLDER = "4567"
INSTALL = "pip install './kinesis-spout[demo]'"
"""The README's install line, run as written: ``./kinesis-spout`` is the checkout."""
STATE = "quickstart-env.sh"
"""The exported environment after the first block (the activated virtualenv, the
credentials), sourced by the later blocks as the reader's shell would keep it."""


@dataclass(frozen=True)
class Block:
    lang: str
    text: str


def quickstart_blocks(readme: str) -> list[Block]:
    """The fenced code blocks of the README's ``## Quickstart`` section, in order."""
    start = readme.index("\n## Quickstart")
    end = readme.index("\n## ", start + 1)
    section = readme[start:end]
    found = re.findall(r"^```(\w+)\n(.*?)^```$", section, flags=re.M | re.S)
    return [Block(lang, text) for lang, text in found]


def shell_env(tmp_path: Path) -> dict[str, str]:
    """A clean environment: no AWS settings, no project virtualenv on PATH; ``python3``
    is the base interpreter of the one running the tests."""
    bin_dir = tmp_path / "base-bin"
    bin_dir.mkdir()
    base = getattr(sys, "_base_executable", sys.executable)
    (bin_dir / "python3").symlink_to(base)
    venv = str(REPO / ".venv")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if not p.startswith(venv)]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "KINESIS_SPOUT_", "VIRTUAL_ENV", "PYTHON"))
    }
    env["PATH"] = os.pathsep.join([str(bin_dir), *path])
    env["PIP_NO_COMPILE"] = "1"  # the install as written, without byte-compiling moto
    return env


def checkout_copy(work: Path) -> Path:
    """``work/kinesis-spout``: what a wheel of this checkout is built from, copied (the
    build writes beside it), where the README's install line takes the checkout."""
    dest = work / "kinesis-spout"
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("tracker", "kinesis_spout"):
        shutil.copytree(REPO / package, dest / package, ignore=ignore)
    return dest


def run_shell(script: str, cwd: Path, env: dict[str, str], timeout: float) -> str:
    """``script`` in bash with the state of the earlier blocks; its output."""
    prelude = f"set -e\n[ -f {STATE} ] && source {STATE}\n"
    res = subprocess.run(
        ["bash", "-c", prelude + script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert res.returncode == 0, f"{script}\nexit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res.stdout


def wait_for_port(port: int, deadline: float) -> None:
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        assert time.monotonic() < deadline, f"the emulator never listened on {port}"
        time.sleep(0.1)


@contextlib.contextmanager
def first_block(block: Block, cwd: Path, env: dict[str, str], port: int) -> Iterator[None]:
    """Run the set-up block (virtualenv, install, emulator in the background); stop the
    emulator (the block's process group) when done."""
    assert block.text.count(INSTALL) == 1, block.text
    checkout_copy(cwd)
    script = f"set -e\n{block.text}\nexport -p > {STATE}\n"
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, out[-3000:]
        wait_for_port(port, time.monotonic() + 60)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


def lines_of(stream: IO[str]) -> queue.Queue[str | None]:
    """A queue fed with the lines of ``stream`` by a thread (None at its end)."""
    q: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            q.put(line.rstrip("\n"))
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def run_loop(command: str, promised: str, cwd: Path, env: dict[str, str]) -> list[str]:
    """Run the loop until it prints ``promised``, stop it with SIGTERM; its output."""
    proc = subprocess.Popen(
        ["bash", "-c", f"source {STATE}\nexec {command}"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    q, seen = lines_of(proc.stdout), []
    deadline = time.monotonic() + 90
    try:
        while promised not in seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no {promised!r} within 90 s:\n" + "\n".join(seen[-40:])
            with contextlib.suppress(queue.Empty):
                line = q.get(timeout=min(left, 1.0))
                assert line is not None, "the loop ended by itself:\n" + "\n".join(seen[-40:])
                seen.append(line)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, "\n".join(seen[-40:])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    while (line := q.get(timeout=10)) is not None:
        seen.append(line)
    return seen


def last_sequences(port: int, stream: str) -> dict[str, str]:
    """The sequence number of the last record of each shard, read back from the emulator."""
    client: Any = boto3.client(
        "kinesis",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    last: dict[str, str] = {}
    for shard in client.list_shards(StreamName=stream)["Shards"]:
        it = client.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records = client.get_records(ShardIterator=it, Limit=10000)["Records"]
        if records:
            last[shard["ShardId"]] = records[-1]["SequenceNumber"]
    return last


def test_the_readme_quickstart_runs_as_written(tmp_path: Path) -> None:
    blocks = quickstart_blocks(README.read_text())
    assert [b.lang for b in blocks] == ["bash", "toml", "bash", "python", "bash", "bash"]
    port = free_port()
    blocks = [Block(b.lang, b.text.replace(PORT_PLACEHOLDER, str(port))) for b in blocks]
    setup, job_toml, put, loop_py, run, check = blocks
    work = tmp_path / "work"
    work.mkdir()
    env = shell_env(tmp_path)
    with first_block(setup, work, env, port):
        (work / "job.toml").write_text(job_toml.text)
        run_shell(put.text, work, env, timeout=120)
        (work / "loop.py").write_text(loop_py.text)
        command, _, comment = run.text.strip().partition("#")
        promised = re.search(r"(acked \d+, dead-lettered \d+, in flight 0)", comment)
        assert promised is not None, run.text
        output = run_loop(command.strip(), promised.group(1), work, env)
        check_after_stop(output, check, work, env, port)


def check_after_stop(
    output: list[str], check: Block, work: Path, env: dict[str, str], port: int
) -> None:
    """After SIGTERM: every record was handled, and ``status`` and ``dead-letters list``
    (as the README runs them) show every record checkpointed and the one dead letter."""
    orders = {line for line in output if line.startswith("order ")}
    assert len(orders) == 99, output[-20:]
    status_line, list_line = (
        line.partition("#")[0].strip() for line in check.text.strip().splitlines()
    )
    status = run_shell(status_line, work, env, timeout=60)
    assert "0 with records waiting" in status, status
    shard_rows = [line for line in status.splitlines() if line.startswith("shardId-")]
    assert len(shard_rows) == 2 and all("caught up" in row for row in shard_rows), status
    assert "; 1 dead letter" in status, status
    report = json.loads(run_shell(status_line + " --json", work, env, timeout=60))
    checkpoints = {s["shard_id"]: s["checkpoint"] for s in report["shards"]}
    last = last_sequences(port, "orders")
    assert len(last) == 2
    for shard, sequence in last.items():
        assert checkpoints[shard] is not None, report
        assert checkpoints[shard]["sequence"] == sequence, (shard, report)
    letters = run_shell(list_line, work, env, timeout=60)
    assert "1 dead letter in ./dead-letter (job 'billing', stream 'orders')" in letters, letters
    assert "JSONDecodeError" in letters, letters
