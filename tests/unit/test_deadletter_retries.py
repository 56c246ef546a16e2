"""Hole 5: exactly one dead letter per given-up record across retries of the write.

A write that fails after some or all of its bytes reached the file (disk full at
fsync, a short write) used to leave them there and be written again by the retry:
two entries for one record.  Faults are injected at the OS calls the sink makes;
the files are real.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from test_deadletter import rec

from kinesis_spout.deadletter import JsonlDeadLetterSink, read_dead_letters
from kinesis_spout.deadletter import jsonl as deadletter


def disk_full() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_fsync_then_a_retry_leaves_one_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = JsonlDeadLetterSink(tmp_path, "job")
    sink.write(rec(1), "boom", 4)
    real_fsync = os.fsync
    calls = {"n": 0}

    def failing_fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise disk_full()
        real_fsync(fd)

    monkeypatch.setattr(deadletter.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space"):
        sink.write(rec(2), "boom", 4)
    sink.write(rec(2), "boom", 4)  # the spout retries the pending dead letter
    sink.write(rec(3), "boom", 4)
    sink.close()
    assert [e["sequence_number"] for e in read_dead_letters(tmp_path)] == ["1", "2", "3"]


def test_a_short_write_is_rolled_back_before_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = JsonlDeadLetterSink(tmp_path, "job")
    sink.write(rec(1), "boom", 4)
    real_write = os.write
    calls = {"n": 0}

    def short_then_full(fd: int, data: bytes | memoryview) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            real_write(fd, bytes(data[:10]))  # ten bytes land, then the disk is full
            raise disk_full()
        return real_write(fd, data)

    monkeypatch.setattr(deadletter.os, "write", short_then_full)
    with pytest.raises(OSError):
        sink.write(rec(2), "boom", 4)
    sink.write(rec(2), "boom", 4)
    sink.close()
    lines = sink.path_for("s", "shardId-000000000001").read_bytes().splitlines()
    assert len(lines) == 2  # no torn fragment left behind
    assert [e["sequence_number"] for e in read_dead_letters(tmp_path)] == ["1", "2"]


def test_a_restart_after_a_failed_write_does_not_duplicate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = JsonlDeadLetterSink(tmp_path, "job")

    def failing_fsync(fd: int) -> None:
        raise disk_full()

    monkeypatch.setattr(deadletter.os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        sink.write(rec(5), "boom", 4)
    monkeypatch.undo()
    sink.close()
    again = JsonlDeadLetterSink(tmp_path, "job")  # the replayed record is given up again
    again.write(rec(5), "boom", 4)
    again.write(rec(5), "boom", 4)
    again.close()
    assert [e["sequence_number"] for e in read_dead_letters(tmp_path)] == ["5"]
