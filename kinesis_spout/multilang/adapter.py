"""The child side of Storm's ShellSpout protocol, around a spout.

:class:`ShellSpoutAdapter` speaks to Storm over a :class:`MessageReader` /
:class:`MessageWriter` pair and drives any object with the spout's shape
(:class:`SpoutLike`, e.g. :class:`kinesis_spout.spout.KinesisSpout`):

1. handshake: read ``{"conf", "pidDir", "context"}``, create the empty file
   ``<pidDir>/<pid>``, reply ``{"pid": N}``;
2. build the spout from the Storm conf (a callback), ``open()`` it;
3. loop: read one command (``next``, ``ack``, ``fail``, ``activate``,
   ``deactivate``), reply with zero or more ``emit``/``log`` messages and then
   exactly one ``{"command": "sync"}``. After an emit that asks for task ids
   the parent's JSON list is read before anything else;
4. at the end of input: checkpoint and close the spout, exit status 0.

Malformed input (not JSON, unknown command, no id, input ending inside a
message or before the task ids) is fatal: an ``error`` message naming the
problem, the spout is closed (its checkpoint covers only finished records),
exit status 2. An ack or fail of an id this process has no record of in
flight is not fatal: it is logged (a Storm ``log`` message) and ignored.
"""

from __future__ import annotations

import base64
import enum
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from kinesis_spout.errors import ConfigError, KinesisSpoutError
from kinesis_spout.multilang.protocol import MessageReader, MessageWriter, ProtocolError

log = logging.getLogger(__name__)

OUTPUT_FIELDS: tuple[str, ...] = (
    "data",
    "encoding",
    "partition_key",
    "shard_id",
    "sequence_number",
    "sub_sequence_number",
    "attempt",
    "approximate_arrival_ms",
)
"""The fields of every emitted tuple, in order (declare them in the Java ShellSpout)."""

DATA_ENCODINGS = ("auto", "base64")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

# Storm's ShellLogLevel numbers, used in the optional "level" of a log message.
_STORM_LEVEL = {
    logging.DEBUG: 1,
    logging.INFO: 2,
    logging.WARNING: 3,
    logging.ERROR: 4,
    logging.CRITICAL: 4,
}


class ExitCode(enum.IntEnum):
    """Exit status of ``python -m kinesis_spout.multilang``."""

    OK = 0
    """End of input, or SIGTERM: the spout was checkpointed and closed."""
    FAILED = 1
    """The spout failed (unknown stream, unreachable endpoint, store refused...)."""
    BAD_INPUT = 2
    """The parent broke the protocol, or the configuration is invalid."""


class SpoutRecord(Protocol):
    """What the adapter reads from a record (:class:`kinesis_spout.records.Record`)."""

    @property
    def message_id(self) -> str: ...
    @property
    def data(self) -> bytes: ...
    @property
    def partition_key(self) -> str: ...
    @property
    def shard_id(self) -> str: ...
    @property
    def sequence_number(self) -> str: ...
    @property
    def sub_sequence_number(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def approximate_arrival(self) -> datetime | None: ...


class SpoutLike(Protocol):
    """The part of :class:`kinesis_spout.spout.KinesisSpout` the adapter drives."""

    def open(self) -> None: ...
    def next_batch(self, max_records: int) -> Sequence[SpoutRecord]: ...
    def poll_delay(self) -> float: ...
    def ack(self, message_id: str) -> object: ...
    def fail(self, message_id: str, error: str | None = None) -> object: ...
    def checkpoint(self, force: bool = False) -> object: ...
    def activate(self) -> None: ...
    def deactivate(self) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class MultilangOptions:
    """Settings of the adapter itself (the spout's are in ``SpoutConfig``).

    Set in the Storm conf as ``kinesis.spout.multilang.<name>`` or with the
    command's flags (flags win).
    """

    output_stream: str = "default"
    """Storm stream id of every emit."""
    need_task_ids: bool = True
    """Ask Storm for the task ids of each emit (Storm's default). ``False``
    saves a round trip per record."""
    data_encoding: str = "auto"
    """``auto``: data as text when it is valid UTF-8, else base64 (the
    ``encoding`` field says which); ``base64``: always base64."""
    emits_per_next: int = 100
    """Most records emitted in reply to one ``next`` (1..10000); capped by
    ``topology.max.spout.pending`` when that is set."""
    idle_sleep: float = 0.05
    """Longest sleep before the ``sync`` of a ``next`` that found nothing
    (0..1 s); the spout's own ``poll_delay()`` is used when shorter."""
    log_level: str = "INFO"
    """Lowest level of log records sent to Storm as ``log`` messages."""

    def __post_init__(self) -> None:
        def check(ok: bool, name: str, value: Any, allowed: str) -> None:
            if not ok:
                raise ConfigError(f"multilang.{name}", value, allowed)

        check(
            isinstance(self.output_stream, str) and bool(self.output_stream),
            "output_stream",
            self.output_stream,
            "a non-empty Storm stream id",
        )
        check(isinstance(self.need_task_ids, bool), "need_task_ids", self.need_task_ids, "a bool")
        check(
            self.data_encoding in DATA_ENCODINGS,
            "data_encoding",
            self.data_encoding,
            "one of " + ", ".join(DATA_ENCODINGS),
        )
        check(
            isinstance(self.emits_per_next, int)
            and not isinstance(self.emits_per_next, bool)
            and 1 <= self.emits_per_next <= 10_000,
            "emits_per_next",
            self.emits_per_next,
            "an integer between 1 and 10000",
        )
        check(
            isinstance(self.idle_sleep, int | float)
            and not isinstance(self.idle_sleep, bool)
            and 0 <= self.idle_sleep <= 1,
            "idle_sleep",
            self.idle_sleep,
            "a number of seconds between 0 and 1",
        )
        check(
            self.log_level in LOG_LEVELS,
            "log_level",
            self.log_level,
            "one of " + ", ".join(LOG_LEVELS),
        )

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> MultilangOptions:
        """Options from loosely typed values (CLI strings, Storm conf JSON)."""
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for name, value in values.items():
            if name not in known:
                raise ConfigError(
                    f"multilang.{name}", value, "unknown option; known: " + ", ".join(known)
                )
            kwargs[name] = _coerce_option(name, value, type(getattr(cls(), name)))
        return cls(**kwargs)

    def replace(self, **changes: Any) -> MultilangOptions:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return MultilangOptions(**values)


def _coerce_option(name: str, value: Any, typ: type) -> Any:
    if not isinstance(value, str):
        if typ is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value  # validated by __post_init__
    text = value.strip()
    try:
        if typ is bool:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if typ is int:
            return int(text)
        if typ is float:
            return float(text)
    except ValueError:
        raise ConfigError(f"multilang.{name}", value, f"expected {typ.__name__}") from None
    return text.upper() if name == "log_level" else text


@dataclass(frozen=True, slots=True)
class StormContext:
    """What Storm sent in the handshake."""

    conf: dict[str, Any]
    """The topology configuration."""
    pid_dir: str
    """Where the pid file was created."""
    context: dict[str, Any] = field(default_factory=dict)
    """The topology context (task ids, component id, streams...)."""

    @property
    def task_id(self) -> int | None:
        tid = self.context.get("taskid")
        return tid if isinstance(tid, int) else None

    @property
    def component_id(self) -> str | None:
        cid = self.context.get("componentid")
        return cid if isinstance(cid, str) else None


def encode_tuple(record: SpoutRecord, data_encoding: str = "auto") -> list[Any]:
    """The values of an emitted tuple, in :data:`OUTPUT_FIELDS` order."""
    data: str
    encoding = "base64"
    if data_encoding == "auto":
        try:
            data = record.data.decode("utf-8")
            encoding = "utf-8"
        except UnicodeDecodeError:
            data = base64.b64encode(record.data).decode("ascii")
    else:
        data = base64.b64encode(record.data).decode("ascii")
    arrival = record.approximate_arrival
    return [
        data,
        encoding,
        record.partition_key,
        record.shard_id,
        record.sequence_number,
        record.sub_sequence_number,
        record.attempt,
        int(arrival.timestamp() * 1000) if arrival is not None else None,
    ]


def decode_data(value: str, encoding: str) -> bytes:
    """Inverse of the ``data``/``encoding`` pair of :func:`encode_tuple` (for bolts, tests)."""
    if encoding == "utf-8":
        return value.encode("utf-8")
    if encoding == "base64":
        return base64.b64decode(value, validate=True)
    raise ValueError(f"unknown data encoding {encoding!r}: expected utf-8 or base64")


class StormLogHandler(logging.Handler):
    """Queues log records; the adapter sends them as Storm ``log`` messages
    before its next ``sync`` (never in the middle of an exchange, and never
    before the handshake reply). Holds at most ``capacity`` records; older
    ones are dropped and counted."""

    def __init__(self, level: int = logging.INFO, capacity: int = 1000) -> None:
        super().__init__(level)
        self._queue: deque[tuple[int, str]] = deque(maxlen=capacity)
        self._queue_lock = threading.Lock()
        self.dropped = 0
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # logging must never break the protocol
            self.handleError(record)
            return
        with self._queue_lock:
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1
            self._queue.append((_STORM_LEVEL.get(record.levelno, 2), text))

    def drain(self) -> list[tuple[int, str]]:
        """Queued ``(storm_level, text)`` pairs, oldest first; empties the queue."""
        with self._queue_lock:
            items = list(self._queue)
            self._queue.clear()
            dropped, self.dropped = self.dropped, 0
        if dropped:
            items.append((3, f"{__name__}: {dropped} log messages dropped (queue full)"))
        return items


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
        self._reading = False
        self._stop_requested = False
        # counters (also useful in tests)
        self.emitted = 0
        self.acked = 0
        self.failed = 0
        self.unknown_ids = 0
        self.commands = 0

    # --- entry points ---------------------------------------------------------
    def run(self) -> int:
        """The whole conversation; returns the process exit status."""
        try:
            self.storm = self._handshake()
            self.spout, self.options = self.configure(self.storm)
            if self.log_handler is not None:
                self.log_handler.setLevel(self.options.log_level)
            log.info(
                "ShellSpout child pid %d for component %s task %s: stream %r, emits per next %d",
                self.pid,
                self.storm.component_id,
                self.storm.task_id,
                self.options.output_stream,
                self.options.emits_per_next,
            )
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
            "exiting with %d: %d emitted, %d acked, %d failed, %d unknown ids",
            code,
            self.emitted,
            self.acked,
            self.failed,
            self.unknown_ids,
        )
        return int(code)

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
        try:
            records = self.spout.next_batch(self.options.emits_per_next)
        except KinesisSpoutError as exc:
            if not exc.retriable:
                raise
            log.warning("reading failed, will retry: %s", exc)
            records = []
        for record in records:
            self._emit(record)
        if not records:
            delay = min(max(self.spout.poll_delay(), 0.0), self.options.idle_sleep)
            if delay > 0:
                self.sleep(delay)

    def _emit(self, record: SpoutRecord) -> None:
        mid = record.message_id
        msg: dict[str, Any] = {
            "command": "emit",
            "id": mid,
            "stream": self.options.output_stream,
            "tuple": encode_tuple(record, self.options.data_encoding),
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
        self.spout.ack(mid)
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
        self.spout.fail(mid, "failed in the Storm topology (failed by a bolt, or timed out)")
        self.failed += 1

    def _checkpoint(self) -> None:
        assert self.spout is not None
        try:
            self.spout.checkpoint()
        except KinesisSpoutError as exc:
            if not exc.retriable:
                raise
            log.warning("checkpoint failed, will retry: %s", exc)

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
