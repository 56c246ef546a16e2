"""The child side of Storm's ShellSpout protocol, around a spout.

:class:`ShellSpoutAdapter` speaks to Storm over a :class:`MessageReader` /
:class:`MessageWriter` pair and drives any object with the spout's shape
(:class:`SpoutLike`, e.g. :class:`kinesis_spout.spout.KinesisSpout`): the handshake, then
one command at a time (``next``, ``ack``, ``fail``, ``activate``, ``deactivate``), each
answered with zero or more ``emit``/``log`` messages and exactly one ``sync``; at the end
of input it checkpoints and closes the spout. Malformed input is fatal (an ``error``
message, the spout closed, exit status 2); an ack or fail of an unknown id is only
logged. The protocol and every error case: docs/multilang.md.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kinesis_spout.errors import ConfigError, KinesisSpoutError
from kinesis_spout.multilang.bridge import SpoutBridge
from kinesis_spout.multilang.logs import StormLogHandler
from kinesis_spout.multilang.options import (
    DATA_ENCODINGS,
    LOG_LEVELS,
    ExitCode,
    MultilangOptions,
    StormContext,
)
from kinesis_spout.multilang.protocol import MessageReader, MessageWriter, ProtocolError
from kinesis_spout.multilang.tuples import (
    OUTPUT_FIELDS,
    SpoutLike,
    SpoutRecord,
    decode_data,
    encode_tuple,
    output_fields,
    tuple_id,
)

log = logging.getLogger(__name__)

_FAILED_IN_STORM = "failed in the Storm topology (failed by a bolt, or timed out)"


class _Stopped(Exception):
    """SIGTERM arrived while waiting for input."""


Configure = Callable[[StormContext], tuple[SpoutLike, MultilangOptions]]


class ShellSpoutAdapter:
    """Runs one Storm ShellSpout conversation; see the module docstring."""

    def __init__(
        self,
        reader: MessageReader,
        writer: MessageWriter,
        configure: Configure,
        *,
        log_handler: StormLogHandler | None = None,
        sleep: Callable[[float], None] = time.sleep,
        pid: int | None = None,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.configure = configure
        self.log_handler = log_handler
        self.sleep = sleep
        self.pid = os.getpid() if pid is None else pid
        self.spout: SpoutLike | None = None
        self._opened = False
        self.options = MultilangOptions()
        self.storm: StormContext | None = None
        self._pending: set[str] = set()
        self._several_streams = False
        self._reading = False
        self._stop_requested = False
        # counters (also useful in tests)
        self.emitted = 0
        self.acked = 0
        self.failed = 0
        self.unknown_ids = 0
        self.commands = 0
        self._spout_bridge: SpoutBridge | None = None

    # --- entry points ---------------------------------------------------------
    def run(self) -> int:
        """The whole conversation; returns the process exit status."""
        try:
            self.storm = self._handshake()
            self.spout, self.options = self.configure(self.storm)
            if self.log_handler is not None:
                self.log_handler.setLevel(self.options.log_level)
            streams = self.spout.config.stream_names
            self._several_streams = len(streams) > 1
            self._log_start(streams)
            self.spout.open()
            self._opened = True
        except (ProtocolError, ConfigError) as exc:
            return int(self._fatal(exc, ExitCode.BAD_INPUT))
        except KinesisSpoutError as exc:
            self._close_spout()
            return int(self._fatal(exc, ExitCode.FAILED))

        code = ExitCode.OK
        try:
            self._loop()
        except _Stopped:
            log.info("SIGTERM: stopping")
        except ProtocolError as exc:
            code = self._fatal(exc, ExitCode.BAD_INPUT)
        except KinesisSpoutError as exc:
            code = self._fatal(exc, ExitCode.FAILED)
        except Exception as exc:
            log.exception("unexpected error in the multilang loop")
            code = self._fatal(exc, ExitCode.FAILED)
        if not self._close_spout() and code == ExitCode.OK:
            code = ExitCode.FAILED
        log.info(
            "exiting with %d: %d emitted, %d acked, %d failed, %d unknown ids, %d spout errors",
            code,
            self.emitted,
            self.acked,
            self.failed,
            self.unknown_ids,
            self.spout_errors,
        )
        return int(code)

    def _log_start(self, streams: tuple[str, ...]) -> None:
        assert self.storm is not None
        log.info(
            "ShellSpout child pid %d for component %s task %s: reads %s, emits to Storm "
            "stream %r with fields %s, %d per next",
            self.pid,
            self.storm.component_id,
            self.storm.task_id,
            ", ".join(streams),
            self.options.output_stream,
            ", ".join(output_fields(self.options.include_stream_name)),
            self.options.emits_per_next,
        )

    def request_stop(self) -> None:
        """For a SIGTERM handler: stop after the current command, or at once
        if blocked waiting for input (then no spout state is being changed)."""
        self._stop_requested = True
        if self._reading:
            raise _Stopped

    @property
    def pending(self) -> frozenset[str]:
        """Message ids emitted to Storm and not yet acked or failed by it."""
        return frozenset(self._pending)

    # --- protocol steps ------------------------------------------------------------
    def _read(self) -> Any:
        self._reading = True
        try:
            if self._stop_requested:
                raise _Stopped
            return self.reader.read()
        finally:
            self._reading = False

    def _handshake(self) -> StormContext:
        msg = self._read()
        if msg is None:
            raise ProtocolError("input ended before the handshake (expected conf, pidDir, context)")
        if not isinstance(msg, dict):
            raise ProtocolError(
                f"handshake: expected an object with conf, pidDir and context, got {_short(msg)}"
            )
        conf, pid_dir, context = msg.get("conf"), msg.get("pidDir"), msg.get("context", {})
        if not isinstance(conf, dict):
            raise ProtocolError(f"handshake: 'conf' must be an object, got {_short(conf)}")
        if not isinstance(pid_dir, str) or not pid_dir:
            raise ProtocolError(
                f"handshake: 'pidDir' must be a directory path, got {_short(pid_dir)}"
            )
        if not isinstance(context, dict):
            raise ProtocolError(f"handshake: 'context' must be an object, got {_short(context)}")
        try:
            (Path(pid_dir) / str(self.pid)).touch()
        except OSError as exc:
            raise ProtocolError(
                f"handshake: cannot create the pid file in pidDir {pid_dir!r}: {exc.strerror}"
            ) from None
        self.writer.write({"pid": self.pid})
        self.writer.flush()
        return StormContext(conf=conf, pid_dir=pid_dir, context=context)

    def _loop(self) -> None:
        while not self._stop_requested:
            msg = self._read()
            if msg is None:
                log.info("end of input: shutting down")
                return
            self.commands += 1
            self._dispatch(msg)
            self._checkpoint()
            self._send_logs()
            self.writer.write({"command": "sync"})
            self.writer.flush()

    def _dispatch(self, msg: Any) -> None:
        assert self.spout is not None
        if not isinstance(msg, dict):
            raise ProtocolError(f"expected a command object, got {_short(msg)}")
        command = msg.get("command")
        if command == "next":
            self._next()
        elif command == "ack":
            self._ack(_message_id(msg))
        elif command == "fail":
            self._fail(_message_id(msg))
        elif command == "activate":
            self.spout.activate()
        elif command == "deactivate":
            self.spout.deactivate()
        else:
            raise ProtocolError(
                f"unknown command {command!r} (expected next, ack, fail, activate or deactivate)"
            )

    def _next(self) -> None:
        assert self.spout is not None
        records = self._bridge().next_batch(self.options.emits_per_next)
        for record in records:
            self._emit(record)
        if not records:
            delay = min(max(self.spout.poll_delay(), 0.0), self.options.idle_sleep)
            if delay > 0:
                self.sleep(delay)

    def _emit(self, record: SpoutRecord) -> None:
        mid = tuple_id(record, self._several_streams)
        msg: dict[str, Any] = {
            "command": "emit",
            "id": mid,
            "stream": self.options.output_stream,
            "tuple": encode_tuple(
                record, self.options.data_encoding, self.options.include_stream_name
            ),
        }
        if not self.options.need_task_ids:
            msg["need_task_ids"] = False
        self.writer.write(msg)
        self._pending.add(mid)
        self.emitted += 1
        if self.options.need_task_ids:
            self.writer.flush()
            reply = self._read()
            if reply is None:
                raise ProtocolError(f"input ended while waiting for the task ids of emit {mid}")
            if not isinstance(reply, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in reply
            ):
                raise ProtocolError(
                    f"expected the task ids of emit {mid} (a JSON list of integers), "
                    f"got {_short(reply)}"
                )

    def _ack(self, mid: str) -> None:
        assert self.spout is not None
        if mid not in self._pending:
            self.unknown_ids += 1
            log.warning("ack of unknown message id %r ignored (not in flight in this process)", mid)
            return
        self._pending.discard(mid)
        if self._bridge().ack(mid):
            self.acked += 1

    def _fail(self, mid: str) -> None:
        assert self.spout is not None
        if mid not in self._pending:
            self.unknown_ids += 1
            log.warning(
                "fail of unknown message id %r ignored (not in flight in this process)", mid
            )
            return
        self._pending.discard(mid)
        if self._bridge().fail(
            mid, "failed in the Storm topology (failed by a bolt, or timed out)"
        ):
            self.failed += 1

    def _checkpoint(self) -> None:
        self._bridge().checkpoint()

    def _bridge(self) -> SpoutBridge:
        assert self.spout is not None
        if self._spout_bridge is None or self._spout_bridge.spout is not self.spout:
            self._spout_bridge = SpoutBridge(self.spout)
        return self._spout_bridge

    @property
    def spout_errors(self) -> int:
        """Retriable errors raised by the spout that the process survived (each logged)."""
        return 0 if self._spout_bridge is None else self._spout_bridge.errors

    def _send_logs(self) -> None:
        if self.log_handler is None:
            return
        for level, text in self.log_handler.drain():
            self.writer.write({"command": "log", "msg": text, "level": level})

    # --- endings ----------------------------------------------------------------
    def _fatal(self, exc: BaseException, code: ExitCode) -> ExitCode:
        text = str(exc) or type(exc).__name__
        log.error("fatal: %s", text)
        try:
            self._send_logs()
            self.writer.write({"command": "error", "msg": text})
            self.writer.flush()
        except (OSError, ValueError):
            pass  # the parent is gone; stderr has it
        return code

    def _close_spout(self) -> bool:
        """Checkpoint (if opened) and close; False if either failed (logged)."""
        spout, self.spout = self.spout, None
        if spout is None:
            return True
        ok = True
        if self._opened:
            try:
                spout.checkpoint(force=True)
            except Exception as exc:
                ok = False
                log.error("final checkpoint failed: %s", exc)
        try:
            spout.close()
        except Exception as exc:
            ok = False
            log.error("closing the spout failed: %s", exc)
        return ok


def _message_id(msg: dict[str, Any]) -> str:
    mid = msg.get("id")
    if isinstance(mid, str) and mid:
        return mid
    if isinstance(mid, int) and not isinstance(mid, bool):
        return str(mid)
    raise ProtocolError(f"{msg.get('command')} without a message id: {_short(msg)}")


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


__all__ = [
    "DATA_ENCODINGS",
    "LOG_LEVELS",
    "OUTPUT_FIELDS",
    "Configure",
    "ExitCode",
    "MultilangOptions",
    "ShellSpoutAdapter",
    "SpoutLike",
    "SpoutRecord",
    "StormContext",
    "StormLogHandler",
    "decode_data",
    "encode_tuple",
    "output_fields",
]
