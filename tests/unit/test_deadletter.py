"""The JSON-lines dead-letter sink: durable, one entry per record even across restarts."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest

from kinesis_spout.deadletter import JsonlDeadLetterSink, read_dead_letters
from kinesis_spout.records import Record
from tracker import SequenceKey


def rec(seq: int, shard: str = "shardId-000000000001", data: bytes = b"x") -> Record:
    return Record("s", shard, str(seq), 0, "pk", data, None, SequenceKey(seq, 0), 4)


def test_entries_carry_the_error_and_the_payload(tmp_path: Path) -> None:
    sink = JsonlDeadLetterSink(tmp_path, "job")
    sink.write(rec(7, data=b"\xff\x00"), "ValueError: bad", 4)
    sink.close()
    [entry] = read_dead_letters(tmp_path)
    assert entry["message_id"] == "shardId-000000000001:7"
    assert entry["error"] == "ValueError: bad"
    assert entry["attempts"] == 4
    assert base64.b64decode(entry["data_base64"]) == b"\xff\x00"
    assert sink.path_for("s", "shardId-000000000001").parent == tmp_path / "job" / "s"


def test_a_record_replayed_after_a_restart_is_not_dead_lettered_twice(tmp_path: Path) -> None:
    first = JsonlDeadLetterSink(tmp_path, "job")
    first.write(rec(1), "boom", 4)
    first.write(rec(2), "boom", 4)
    first.close()
    again = JsonlDeadLetterSink(tmp_path, "job")  # a restart replays records 2 and 3
    again.write(rec(2), "boom again", 4)
    again.write(rec(3), "boom", 4)
    again.write(rec(3), "boom", 4)
    again.close()
    entries = read_dead_letters(tmp_path)
    assert [e["sequence_number"] for e in entries] == ["1", "2", "3"]
    assert entries[1]["error"] == "boom"  # the first entry stays
    assert again.written == 1


def test_a_line_cut_short_by_a_crash_is_skipped_and_not_glued_to_the_next(tmp_path: Path) -> None:
    sink = JsonlDeadLetterSink(tmp_path, "job")
    sink.write(rec(1), "boom", 4)
    sink.close()
    path = sink.path_for("s", "shardId-000000000001")
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"message_id": "shardId-000000000001:2", "err')  # torn write
    again = JsonlDeadLetterSink(tmp_path, "job")
    again.write(rec(2), "boom", 4)  # the torn one never counted: written now
    again.close()
    assert [e["sequence_number"] for e in read_dead_letters(tmp_path)] == ["1", "2"]


def test_the_dead_letter_warning_names_the_stream(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A shard id exists in every stream: ``dead-lettered shardId-…:8`` said which record
    only with the stream in front."""
    from kinesis_spout.deadletter.base import DeadLetter

    sink = JsonlDeadLetterSink(tmp_path, "billing")
    rec = Record("payments", "shardId-000000000000", "8", 0, "pk", b"x", None, SequenceKey(8))
    with caplog.at_level(logging.WARNING, logger="kinesis_spout.deadletter"):
        sink.write_many([DeadLetter(rec, "boom", 3)])
    sink.close()
    assert "dead-lettered payments/shardId-000000000000:8 (exhausted) after 3 attempts" in (
        caplog.text
    )
