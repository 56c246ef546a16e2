"""The ShellSpout conversation, driven by scripted input against a fake spout.

The fake spout stands in for :class:`kinesis_spout.spout.KinesisSpout` so that
only the adapter's protocol logic is under test here; the real spout over
real pipes is in ``tests/integration/multilang``.
"""

from __future__ import annotations

import base64
import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_spout.config import SpoutConfig
from kinesis_spout.config.load import load_config
from kinesis_spout.errors import (
    CheckpointStoreUnavailableError,
    ConfigError,
    KinesisSpoutError,
    StaleCheckpointError,
    StreamNotFoundError,
    ThrottledError,
)
from kinesis_spout.multilang.adapter import (
    OUTPUT_FIELDS,
    ExitCode,
    MultilangOptions,
    ShellSpoutAdapter,
    SpoutLike,
    StormContext,
    StormLogHandler,
    decode_data,
    encode_tuple,
    output_fields,
)
from kinesis_spout.multilang.protocol import MessageReader, MessageWriter, frame


@dataclass(frozen=True)
class FakeRecord:
    shard_id: str
    sequence_number: str
    data: bytes
    partition_key: str = "pk"
    sub_sequence_number: int = 0
    attempt: int = 1
    approximate_arrival: datetime | None = None
    stream_name: str = "orders"

    @property
    def message_id(self) -> str:
        return f"{self.shard_id}:{self.sequence_number}"

    @property
    def stream_message_id(self) -> str:
        return f"{self.stream_name}/{self.message_id}"


def one_stream_config() -> SpoutConfig:
    return load_config(None, env={}, overrides={"stream_name": "orders"})


def two_streams_config() -> SpoutConfig:
    return load_config(None, env={}, overrides={"streams": ["orders", "payments"]})


@dataclass
class FakeSpout:
    """Hands out ``records`` in order; a failed record comes back first."""

    records: list[FakeRecord]
    delay: float = 0.2
    next_error: KinesisSpoutError | None = None
    ack_error: KinesisSpoutError | None = None
    checkpoint_error: KinesisSpoutError | None = None
    config: SpoutConfig = field(default_factory=lambda: one_stream_config())
    calls: list[tuple[str, Any]] = field(default_factory=list)
    _retry: list[FakeRecord] = field(default_factory=list)
    _by_id: dict[str, FakeRecord] = field(default_factory=dict)

    def open(self) -> None:
        self.calls.append(("open", None))

    def next_batch(self, max_records: int) -> Sequence[FakeRecord]:
        self.calls.append(("next_batch", max_records))
        if self.next_error is not None:
            err, self.next_error = self.next_error, None
            raise err
        out: list[FakeRecord] = []
        while (self._retry or self.records) and len(out) < max_records:
            r = self._retry.pop(0) if self._retry else self.records.pop(0)
            self._by_id[r.message_id] = self._by_id[r.stream_message_id] = r
            out.append(r)
        return out

    def poll_delay(self) -> float:
        return self.delay

    def ack(self, message_id: str) -> None:
        self.calls.append(("ack", message_id))
        if self.ack_error is not None:
            err, self.ack_error = self.ack_error, None
            raise err

    def fail(self, message_id: str, error: str | None = None) -> None:
        self.calls.append(("fail", message_id))
        r = self._by_id[message_id]
        self._retry.append(FakeRecord(**{**r.__dict__, "attempt": r.attempt + 1}))

    def checkpoint(self, force: bool = False) -> None:
        self.calls.append(("checkpoint", force))
        if self.checkpoint_error is not None and not force:
            err, self.checkpoint_error = self.checkpoint_error, None
            raise err

    def activate(self) -> None:
        self.calls.append(("activate", None))

    def deactivate(self) -> None:
        self.calls.append(("deactivate", None))

    def close(self) -> None:
        self.calls.append(("close", None))

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


RECS = [
    FakeRecord("shardId-000000000000", "100", b"hello"),
    FakeRecord("shardId-000000000000", "101", b"\xff\x00binary"),
    FakeRecord("shardId-000000000001", "200", "caf\u00e9".encode()),
]


def handshake(pid_dir: Path, conf: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "conf": conf or {"topology.message.timeout.secs": 30},
        "pidDir": str(pid_dir),
        "context": {"taskid": 3, "componentid": "kinesis", "task->component": {"3": "kinesis"}},
    }


@dataclass
class Run:
    code: int
    out: list[Any]
    adapter: ShellSpoutAdapter
    spout: FakeSpout
    sleeps: list[float]


def run(
    messages: Sequence[Any] | bytes,
    tmp_path: Path,
    spout: FakeSpout | None = None,
    options: MultilangOptions | None = None,
    handler: StormLogHandler | None = None,
) -> Run:
    data = messages if isinstance(messages, bytes) else b"".join(frame(m) for m in messages)
    out = io.BytesIO()
    fake = spout if spout is not None else FakeSpout(list(RECS))
    sleeps: list[float] = []

    def configure(storm: StormContext) -> tuple[SpoutLike, MultilangOptions]:
        return fake, options or MultilangOptions()

    adapter = ShellSpoutAdapter(
        MessageReader(io.BytesIO(data)),
        MessageWriter(out),
        configure,
        log_handler=handler,
        sleep=sleeps.append,
        pid=4242,
    )
    code = adapter.run()
    parsed = []
    r = MessageReader(io.BytesIO(out.getvalue()))
    while (m := r.read()) is not None:
        parsed.append(m)
    return Run(code, parsed, adapter, fake, sleeps)


def commands(out: list[Any]) -> list[str]:
    return [m.get("command", "pid" if "pid" in m else "?") for m in out]


def test_handshake_creates_pid_file_and_replies_pid_first(tmp_path: Path) -> None:
    r = run([handshake(tmp_path)], tmp_path)
    assert r.code == ExitCode.OK
    assert (tmp_path / "4242").is_file()
    assert (tmp_path / "4242").stat().st_size == 0
    assert r.out == [{"pid": 4242}]
    assert r.adapter.storm is not None and r.adapter.storm.task_id == 3
    assert r.spout.names() == ["open", "checkpoint", "close"]
    assert r.spout.calls[1] == ("checkpoint", True)


def test_next_emits_each_record_and_reads_task_ids_after_each(tmp_path: Path) -> None:
    msgs = [handshake(tmp_path), {"command": "next"}, [5], [6], [5, 7]]
    r = run(msgs, tmp_path)
    assert r.code == ExitCode.OK
    assert commands(r.out) == ["pid", "emit", "emit", "emit", "sync"]
    emits = r.out[1:4]
    assert [e["id"] for e in emits] == [
        "shardId-000000000000:100",
        "shardId-000000000000:101",
        "shardId-000000000001:200",
    ]
    assert all(e["stream"] == "default" and "need_task_ids" not in e for e in emits)
    first = dict(zip(OUTPUT_FIELDS, emits[0]["tuple"], strict=True))
    assert first["data"] == "hello" and first["encoding"] == "utf-8"
    assert first["partition_key"] == "pk" and first["sequence_number"] == "100"
    second = dict(zip(OUTPUT_FIELDS, emits[1]["tuple"], strict=True))
    assert second["encoding"] == "base64"
    assert decode_data(second["data"], second["encoding"]) == b"\xff\x00binary"
    assert r.adapter.pending == {e["id"] for e in emits}


def test_missing_task_ids_after_emit_is_fatal(tmp_path: Path) -> None:
    msgs = [handshake(tmp_path), {"command": "next"}, [5]]  # input ends before the 2nd list
    r = run(msgs, tmp_path)
    assert r.code == ExitCode.BAD_INPUT
    assert commands(r.out) == ["pid", "emit", "emit", "error"]
    assert "task ids of emit shardId-000000000000:101" in r.out[-1]["msg"]
    assert r.spout.names()[-2:] == ["checkpoint", "close"]


def test_a_command_where_task_ids_belong_is_fatal(tmp_path: Path) -> None:
    msgs = [handshake(tmp_path), {"command": "next"}, {"command": "next"}]
    r = run(msgs, tmp_path)
    assert r.code == ExitCode.BAD_INPUT
    assert r.out[-1]["command"] == "error"
    assert "a JSON list of integers" in r.out[-1]["msg"]


def test_need_task_ids_false_reads_nothing_between_emits(tmp_path: Path) -> None:
    msgs = [handshake(tmp_path), {"command": "next"}, {"command": "next"}]
    r = run(msgs, tmp_path, options=MultilangOptions(need_task_ids=False, emits_per_next=2))
    assert r.code == ExitCode.OK
    assert commands(r.out) == ["pid", "emit", "emit", "sync", "emit", "sync"]
    assert all(m["need_task_ids"] is False for m in r.out if m.get("command") == "emit")


def test_output_stream_and_base64_option(tmp_path: Path) -> None:
    opts = MultilangOptions(need_task_ids=False, output_stream="kinesis", data_encoding="base64")
    r = run([handshake(tmp_path), {"command": "next"}], tmp_path, options=opts)
    emit = r.out[1]
    assert emit["stream"] == "kinesis"
    assert emit["tuple"][:2] == [base64.b64encode(b"hello").decode(), "base64"]


def test_emits_per_next_bounds_each_reply(tmp_path: Path) -> None:
    opts = MultilangOptions(need_task_ids=False, emits_per_next=1)
    r = run([handshake(tmp_path)] + [{"command": "next"}] * 4, tmp_path, options=opts)
    assert commands(r.out) == ["pid"] + ["emit", "sync"] * 3 + ["sync"]
    assert ("next_batch", 1) in r.spout.calls


def test_idle_next_sleeps_at_most_idle_sleep_then_syncs(tmp_path: Path) -> None:
    spout = FakeSpout([], delay=3.0)
    r = run([handshake(tmp_path), {"command": "next"}], tmp_path, spout=spout)
    assert commands(r.out) == ["pid", "sync"]
    assert r.sleeps == [0.05]
    spout = FakeSpout([], delay=0.01)
    r = run([handshake(tmp_path), {"command": "next"}], tmp_path, spout=spout)
    assert r.sleeps == [0.01]
    spout = FakeSpout([], delay=0.0)
    r = run([handshake(tmp_path), {"command": "next"}], tmp_path, spout=spout)
    assert r.sleeps == []


def test_ack_and_fail_reach_the_spout_and_failed_records_come_back(tmp_path: Path) -> None:
    opts = MultilangOptions(need_task_ids=False)
    msgs = [
        handshake(tmp_path),
        {"command": "next"},
        {"command": "ack", "id": "shardId-000000000000:100"},
        {"command": "fail", "id": "shardId-000000000000:101"},
        {"command": "next"},
    ]
    r = run(msgs, tmp_path, options=opts)
    assert r.code == ExitCode.OK
    assert ("ack", "shardId-000000000000:100") in r.spout.calls
    assert ("fail", "shardId-000000000000:101") in r.spout.calls
    assert commands(r.out) == [
        "pid",
        "emit",
        "emit",
        "emit",
        "sync",
        "sync",
        "sync",
        "emit",
        "sync",
    ]
    retry = r.out[-2]
    assert retry["id"] == "shardId-000000000000:101"
    assert dict(zip(OUTPUT_FIELDS, retry["tuple"], strict=True))["attempt"] == 2
    assert r.adapter.acked == 1 and r.adapter.failed == 1


TWO_STREAMS = [
    FakeRecord("shardId-000000000000", "100", b"an order", stream_name="orders"),
    FakeRecord("shardId-000000000000", "100", b"a payment", stream_name="payments"),
]


def test_a_spout_of_several_streams_emits_ids_naming_the_stream_and_takes_them_back(
    tmp_path: Path,
) -> None:
    spout = FakeSpout(list(TWO_STREAMS), config=two_streams_config())
    msgs = [
        handshake(tmp_path),
        {"command": "next"},
        {"command": "ack", "id": "orders/shardId-000000000000:100"},
        {"command": "fail", "id": "payments/shardId-000000000000:100"},
        {"command": "ack", "id": "shardId-000000000000:100"},  # names no stream: not emitted
        {"command": "next"},
    ]
    r = run(msgs, tmp_path, spout=spout, options=MultilangOptions(need_task_ids=False))
    assert r.code == ExitCode.OK
    emits = [m for m in r.out if m.get("command") == "emit"]
    assert [e["id"] for e in emits] == [
        "orders/shardId-000000000000:100",
        "payments/shardId-000000000000:100",
        "payments/shardId-000000000000:100",  # the retry, under the same id
    ]
    assert ("ack", "orders/shardId-000000000000:100") in spout.calls
    assert ("fail", "payments/shardId-000000000000:100") in spout.calls
    assert r.adapter.unknown_ids == 1
    # the default layout: no stream field, the same eight values as a one-stream spout's
    assert emits[0]["tuple"] == [
        "an order",
        "utf-8",
        "pk",
        "shardId-000000000000",
        "100",
        0,
        1,
        None,
    ]
    assert emits[2]["tuple"][6] == 2  # attempt


def test_a_spout_of_one_stream_keeps_its_ids_and_tuple(tmp_path: Path) -> None:
    r = run(
        [handshake(tmp_path), {"command": "next"}],
        tmp_path,
        options=MultilangOptions(need_task_ids=False, emits_per_next=1),
    )
    (emit,) = [m for m in r.out if m.get("command") == "emit"]
    assert emit["id"] == "shardId-000000000000:100"
    assert emit["tuple"] == ["hello", "utf-8", "pk", "shardId-000000000000", "100", 0, 1, None]


@pytest.mark.parametrize("config", [one_stream_config, two_streams_config])
def test_include_stream_name_appends_the_stream_as_a_last_field(
    tmp_path: Path, config: Any
) -> None:
    spout = FakeSpout(list(TWO_STREAMS), config=config())
    opts = MultilangOptions(need_task_ids=False, include_stream_name=True)
    r = run([handshake(tmp_path), {"command": "next"}], tmp_path, spout=spout, options=opts)
    emits = [m for m in r.out if m.get("command") == "emit"]
    assert [e["tuple"] for e in emits] == [
        ["an order", "utf-8", "pk", "shardId-000000000000", "100", 0, 1, None, "orders"],
        ["a payment", "utf-8", "pk", "shardId-000000000000", "100", 0, 1, None, "payments"],
    ]
    fields = output_fields(include_stream_name=True)
    assert dict(zip(fields, emits[1]["tuple"], strict=True))["stream_name"] == "payments"


def test_output_fields_are_the_declared_layout_with_stream_name_opt_in() -> None:
    assert output_fields() == OUTPUT_FIELDS
    assert OUTPUT_FIELDS == (
        "data",
        "encoding",
        "partition_key",
        "shard_id",
        "sequence_number",
        "sub_sequence_number",
        "attempt",
        "approximate_arrival_ms",
    )
    assert output_fields(include_stream_name=True) == (*OUTPUT_FIELDS, "stream_name")


def test_unknown_id_is_logged_not_fatal(tmp_path: Path) -> None:
    handler = StormLogHandler(logging.INFO)
    logging.getLogger().addHandler(handler)
    try:
        msgs = [
            handshake(tmp_path),
            {"command": "ack", "id": "shardId-000000000009:1"},
            {"command": "fail", "id": 12345},
            {"command": "next"},
        ]
        r = run(msgs, tmp_path, options=MultilangOptions(need_task_ids=False), handler=handler)
    finally:
        logging.getLogger().removeHandler(handler)
    assert r.code == ExitCode.OK
    assert "ack" not in r.spout.names() and "fail" not in r.spout.names()
    logs = [m for m in r.out if m.get("command") == "log"]
    assert any("shardId-000000000009:1" in m["msg"] and m["level"] == 3 for m in logs)
    assert any("'12345'" in m["msg"] for m in logs)
    # each log goes out before the sync of the command that caused it
    assert commands(r.out)[1:3] == ["log", "sync"]
    assert r.adapter.unknown_ids == 2
    assert r.out.count({"command": "sync"}) == 3


def test_activate_and_deactivate(tmp_path: Path) -> None:
    msgs = [handshake(tmp_path), {"command": "deactivate"}, {"command": "activate"}]
    r = run(msgs, tmp_path)
    assert commands(r.out) == ["pid", "sync", "sync"]
    assert r.spout.names()[:5] == ["open", "deactivate", "checkpoint", "activate", "checkpoint"]


def test_checkpoint_is_offered_after_every_command(tmp_path: Path) -> None:
    msgs = [handshake(tmp_path)] + [{"command": "next"}] * 3
    r = run(msgs, tmp_path, options=MultilangOptions(need_task_ids=False))
    assert r.spout.calls.count(("checkpoint", False)) == 3
    assert r.spout.calls[-2:] == [("checkpoint", True), ("close", None)]


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ({"command": "dance"}, "unknown command 'dance'"),
        ({"id": "x"}, "unknown command None"),
        ([1, 2], "expected a command object"),
        ({"command": "ack"}, "ack without a message id"),
        ({"command": "fail", "id": ""}, "fail without a message id"),
        ({"command": "ack", "id": True}, "ack without a message id"),
    ],
)
def test_malformed_command_gives_error_and_exit_2(tmp_path: Path, bad: Any, expected: str) -> None:
    r = run(
        [handshake(tmp_path), {"command": "next"}, [1], [1], [1], bad, {"command": "next"}],
        tmp_path,
    )
    assert r.code == ExitCode.BAD_INPUT
    assert r.out[-1]["command"] == "error"
    assert expected in r.out[-1]["msg"]
    assert r.spout.names()[-2:] == ["checkpoint", "close"]
    assert r.spout.names().count("next_batch") == 1  # nothing after the bad command


def test_bad_json_gives_error_and_exit_2(tmp_path: Path) -> None:
    data = frame(handshake(tmp_path)) + b'{"command": next}\nend\n'
    r = run(data, tmp_path)
    assert r.code == ExitCode.BAD_INPUT
    assert commands(r.out) == ["pid", "error"]
    assert "not valid JSON" in r.out[-1]["msg"]


def test_eof_mid_message_gives_error_and_exit_2(tmp_path: Path) -> None:
    data = frame(handshake(tmp_path)) + b'{"command": "next"}\n'
    r = run(data, tmp_path)
    assert r.code == ExitCode.BAD_INPUT
    assert "input ended inside message #2" in r.out[-1]["msg"]


@pytest.mark.parametrize(
    ("hs", "expected"),
    [
        (None, "input ended before the handshake"),
        ([1], "expected an object with conf, pidDir and context"),
        ({"pidDir": "/tmp"}, "'conf' must be an object"),
        ({"conf": {}}, "'pidDir' must be a directory path"),
        ({"conf": {}, "pidDir": "/tmp", "context": 3}, "'context' must be an object"),
        ({"conf": {}, "pidDir": "/nonexistent/dir"}, "cannot create the pid file"),
    ],
)
def test_bad_handshake(tmp_path: Path, hs: Any, expected: str) -> None:
    r = run([] if hs is None else [hs], tmp_path)
    assert r.code == ExitCode.BAD_INPUT
    assert commands(r.out) == ["error"]
    assert expected in r.out[0]["msg"]
    assert r.spout.calls == []  # never built


def test_config_error_after_handshake(tmp_path: Path) -> None:
    out = io.BytesIO()

    def configure(storm: StormContext) -> tuple[SpoutLike, MultilangOptions]:
        raise ConfigError("retry_limit", -1, "an integer >= 0")

    adapter = ShellSpoutAdapter(
        MessageReader(io.BytesIO(frame(handshake(tmp_path)))), MessageWriter(out), configure
    )
    assert adapter.run() == ExitCode.BAD_INPUT
    assert out.getvalue().startswith(b'{"pid":')
    assert b"retry_limit=-1" in out.getvalue()


def test_retriable_read_error_is_a_warning(tmp_path: Path) -> None:
    spout = FakeSpout(list(RECS), next_error=ThrottledError("slow down"))
    r = run([handshake(tmp_path), {"command": "next"}], tmp_path, spout=spout)
    assert r.code == ExitCode.OK
    assert commands(r.out) == ["pid", "sync"]


class ShardStoreError(CheckpointStoreUnavailableError):
    """A store error that names its shard (as the spout's errors may)."""

    shard_id = "shardId-000000000007"


def _error_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_store_error_from_next_batch_is_an_error_log_counted_not_swallowed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Hole 2: a checkpoint store error from ``next_batch`` is logged at ERROR with the
    shard and the error, counted, and the conversation goes on (sync, later emits)."""
    spout = FakeSpout(list(RECS), next_error=ShardStoreError("ZooKeeper unreachable"))
    opts = MultilangOptions(need_task_ids=False)
    with caplog.at_level(logging.INFO):
        r = run(
            [handshake(tmp_path), {"command": "next"}, {"command": "next"}],
            tmp_path,
            spout=spout,
            options=opts,
        )
    assert r.code == ExitCode.OK
    assert commands(r.out) == ["pid", "sync", "emit", "emit", "emit", "sync"]
    errors = _error_logs(caplog)
    assert any("ZooKeeper unreachable" in m and "shardId-000000000007" in m for m in errors)
    assert r.adapter.spout_errors == 1


def test_store_error_from_ack_is_an_error_log_counted_and_the_conversation_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Hole 2: a retriable store error raised by ``ack`` is not fatal (the record stays
    in flight in the spout and times out into a retry): ERROR log, counted, sync."""
    spout = FakeSpout(list(RECS), ack_error=CheckpointStoreUnavailableError("store down"))
    opts = MultilangOptions(need_task_ids=False)
    mid = RECS[0].shard_id + ":" + RECS[0].sequence_number
    with caplog.at_level(logging.INFO):
        r = run(
            [handshake(tmp_path), {"command": "next"}, {"command": "ack", "id": mid}],
            tmp_path,
            spout=spout,
            options=opts,
        )
    assert r.code == ExitCode.OK
    assert commands(r.out) == ["pid", "emit", "emit", "emit", "sync", "sync"]
    assert any("store down" in m for m in _error_logs(caplog))
    assert r.adapter.spout_errors == 1
    assert r.adapter.acked == 0


def test_store_error_from_checkpoint_is_an_error_log_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spout = FakeSpout(list(RECS), checkpoint_error=CheckpointStoreUnavailableError("zk gone"))
    with caplog.at_level(logging.INFO):
        r = run([handshake(tmp_path), {"command": "activate"}], tmp_path, spout=spout)
    assert r.code == ExitCode.OK
    assert commands(r.out) == ["pid", "sync"]
    assert any("zk gone" in m for m in _error_logs(caplog))
    assert r.adapter.spout_errors == 1


def test_a_fenced_ack_stays_fatal(tmp_path: Path) -> None:
    """A non-retriable store error (a zombie's write refused) still ends the process."""
    spout = FakeSpout(list(RECS), ack_error=StaleCheckpointError("lease epoch 3 < 4"))
    opts = MultilangOptions(need_task_ids=False)
    mid = RECS[0].shard_id + ":" + RECS[0].sequence_number
    r = run(
        [handshake(tmp_path), {"command": "next"}, {"command": "ack", "id": mid}],
        tmp_path,
        spout=spout,
        options=opts,
    )
    assert r.code == ExitCode.FAILED
    assert commands(r.out)[-1] == "error"
    assert "lease epoch 3 < 4" in r.out[-1]["msg"]


def test_fatal_spout_error_exits_1_with_error(tmp_path: Path) -> None:
    spout = FakeSpout(list(RECS), next_error=StreamNotFoundError("stream 'x' not found"))
    r = run([handshake(tmp_path), {"command": "next"}, {"command": "next"}], tmp_path, spout=spout)
    assert r.code == ExitCode.FAILED
    assert commands(r.out) == ["pid", "error"]
    assert "stream 'x' not found" in r.out[-1]["msg"]
    assert r.spout.names()[-2:] == ["checkpoint", "close"]


def test_stop_request_while_reading_stops_cleanly(tmp_path: Path) -> None:
    class StopWhenNextRead(io.BytesIO):
        adapter: ShellSpoutAdapter | None = None

        def readline(self, size: int | None = -1) -> bytes:
            if self.tell() == len(frame(handshake(tmp_path))) and self.adapter is not None:
                self.adapter.request_stop()
            return super().readline(size)

    stream = StopWhenNextRead(frame(handshake(tmp_path)) + frame({"command": "next"}))
    fake = FakeSpout(list(RECS))
    adapter = ShellSpoutAdapter(
        MessageReader(stream),
        MessageWriter(io.BytesIO()),
        lambda storm: (fake, MultilangOptions()),
        pid=1,
    )
    stream.adapter = adapter
    assert adapter.run() == ExitCode.OK
    assert "next_batch" not in fake.names()
    assert fake.names()[-2:] == ["checkpoint", "close"]


def test_log_handler_queues_with_levels_and_counts_drops() -> None:
    h = StormLogHandler(logging.INFO, capacity=2)
    logger = logging.getLogger("test.multilang.queue")
    logger.propagate = False
    logger.addHandler(h)
    logger.setLevel(logging.DEBUG)
    try:
        logger.debug("hidden")
        logger.info("one")
        logger.warning("two")
        logger.error("three")
    finally:
        logger.removeHandler(h)
    items = h.drain()
    assert items[:2] == [(3, "test.multilang.queue: two"), (4, "test.multilang.queue: three")]
    assert items[2][0] == 3 and "1 log messages dropped" in items[2][1]
    assert h.drain() == []


def test_options_validation_names_the_option() -> None:
    with pytest.raises(ConfigError, match="multilang.emits_per_next"):
        MultilangOptions(emits_per_next=0)
    with pytest.raises(ConfigError, match="multilang.data_encoding"):
        MultilangOptions(data_encoding="utf-16")
    with pytest.raises(ConfigError, match="multilang.colour"):
        MultilangOptions.from_values({"colour": "red"})
    with pytest.raises(ConfigError, match="multilang.need_task_ids"):
        MultilangOptions.from_values({"need_task_ids": "maybe"})
    opts = MultilangOptions.from_values(
        {"need_task_ids": "false", "emits_per_next": "7", "idle_sleep": 0, "log_level": "debug"}
    )
    assert opts == MultilangOptions(
        need_task_ids=False, emits_per_next=7, idle_sleep=0.0, log_level="DEBUG"
    )
    assert MultilangOptions().include_stream_name is False  # the tuple layout unchanged
    assert MultilangOptions.from_values({"include_stream_name": "yes"}).include_stream_name
    assert not MultilangOptions.from_values({"include_stream_name": False}).include_stream_name
    with pytest.raises(ConfigError, match=r"multilang\.include_stream_name='sometimes'"):
        MultilangOptions.from_values({"include_stream_name": "sometimes"})
    with pytest.raises(ConfigError, match=r"multilang\.include_stream_name=1: a bool"):
        MultilangOptions(include_stream_name=1)  # type: ignore[arg-type]


def test_encode_tuple_fields() -> None:
    arrival = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    rec = FakeRecord("shardId-1", "9", b"{}", "key", 2, 3, arrival)
    assert encode_tuple(rec) == ["{}", "utf-8", "key", "shardId-1", "9", 2, 3, 1767323045678]
    assert len(OUTPUT_FIELDS) == len(encode_tuple(rec))
    with_stream = encode_tuple(rec, "auto", include_stream_name=True)
    assert with_stream == [*encode_tuple(rec), "orders"]
    assert len(output_fields(include_stream_name=True)) == len(with_stream)


@given(st.binary(max_size=64), st.sampled_from(["auto", "base64"]))
def test_data_round_trips(data: bytes, mode: str) -> None:
    value, encoding = encode_tuple(FakeRecord("s", "1", data), mode)[:2]
    assert decode_data(value, encoding) == data
    if mode == "base64":
        assert encoding == "base64"
