"""Play Storm's side of a ShellSpout conversation, for tests: :class:`ShellSpoutParent`.

It starts the child with pipes and speaks the multilang protocol byte for byte
as Storm's ``ShellSpout``/``ShellProcess`` do: ``<json>\\nend\\n`` for the
handshake, each command and each task-id list; after an ``emit`` that does
not say ``"need_task_ids": false`` it answers with a task-id list before
reading on; a command's reply ends at ``sync``.

Every read has a deadline, so a child that hangs fails the test in seconds
(:class:`ChildTimeout`) instead of blocking it. Anything on the child's
stdout that is not a well-formed message fails the read
(:class:`~kinesis_spout.multilang.protocol.ProtocolError`): nothing but the
protocol may be written there. The child's stderr goes to a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.multilang.protocol import ProtocolError, frame

_EOF = object()


class ChildTimeout(KinesisSpoutError):
    """The child did not answer (or exit) within the deadline: it hangs."""


class ChildExited(KinesisSpoutError):
    """The child closed its stdout while a message was expected."""


@dataclass
class Reply:
    """Everything the child sent in answer to one command, up to its ``sync``."""

    emits: list[dict[str, Any]] = field(default_factory=list)
    logs: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    """All of them, in order (the ``sync`` excluded)."""

    @property
    def ids(self) -> list[str]:
        return [str(e["id"]) for e in self.emits]


class ShellSpoutParent:
    """A Storm ShellSpout stand-in driving one child process over pipes."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        stderr_path: str | Path,
        timeout: float = 15.0,
        task_ids: Sequence[int] = (7,),
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.stderr_path = Path(stderr_path)
        self.timeout = timeout
        self.task_ids = list(task_ids)
        self.proc: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[object] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._stderr: IO[bytes] | None = None
        self.raw_out = bytearray()
        """Every byte the child wrote to stdout."""
        self.task_id_replies = 0

    # --- process --------------------------------------------------------------------
    def start(self) -> Self:
        self._stderr = self.stderr_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=self.env,
            cwd=self.cwd,
        )
        self._reader = threading.Thread(target=self._pump, name="shellspout-stdout", daemon=True)
        self._reader.start()
        return self

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            self.raw_out.extend(line)
            self._lines.put(line)
        self._lines.put(_EOF)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def close_stdin(self) -> None:
        """End of input: what Storm's side does when it goes away."""
        assert self.proc is not None and self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.proc.stdin.close()

    def wait(self, timeout: float | None = None) -> int:
        """The exit status; :class:`ChildTimeout` if it does not exit in time."""
        assert self.proc is not None
        try:
            return self.proc.wait(self.timeout if timeout is None else timeout)
        except subprocess.TimeoutExpired:
            raise ChildTimeout(
                f"child {self.proc.pid} did not exit; stderr:\n{self.stderr_text()[-3000:]}"
            ) from None

    def stop(self) -> None:
        """Kill the child if still running (end of a test)."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if self._stderr is not None:
            self._stderr.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- wire -----------------------------------------------------------------------
    def send(self, obj: Any) -> None:
        self.send_raw(frame(obj))

    def send_raw(self, data: bytes) -> None:
        """Exactly these bytes to the child's stdin."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read(self, timeout: float | None = None) -> Any:
        """The child's next message, read as Storm does (lines up to ``end``)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        lines: list[bytes] = []
        while True:
            remaining = deadline - time.monotonic()
            try:
                item = self._lines.get(timeout=max(remaining, 0.001))
            except queue.Empty:
                raise ChildTimeout(
                    f"no complete message from the child within the deadline (got {lines!r}); "
                    f"stderr:\n{self.stderr_text()[-3000:]}"
                ) from None
            if item is _EOF:
                self._lines.put(_EOF)  # stays at EOF
                raise ChildExited(
                    f"child stdout closed (partial message {lines!r}); "
                    f"stderr:\n{self.stderr_text()[-3000:]}"
                )
            assert isinstance(item, bytes)
            if not item.endswith(b"\n"):
                raise ProtocolError(f"child wrote a line without a newline: {item!r}")
            if item == b"end\n":
                break
            lines.append(item)
        body = b"".join(lines)
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ProtocolError(f"child wrote something that is not a message: {body!r}") from exc

    # --- protocol -------------------------------------------------------------------
    def read_error(self) -> str:
        """Read past ``log`` messages to an ``error``; returns its text."""
        while True:
            m = self.read()
            if isinstance(m, dict) and m.get("command") == "log":
                continue
            if isinstance(m, dict) and m.get("command") == "error":
                return str(m.get("msg"))
            raise ProtocolError(f"expected an error message, got {m!r}")

    def handshake(
        self,
        pid_dir: str | Path,
        conf: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> int:
        """Send the setup message; returns the pid the child reported."""
        self.send(
            {
                "conf": dict(conf or {}),
                "pidDir": str(pid_dir),
                "context": dict(
                    context
                    or {
                        "task->component": {"7": "kinesis-spout", "8": "__acker"},
                        "taskid": 7,
                        "componentid": "kinesis-spout",
                        "streams": ["default"],
                    }
                ),
            }
        )
        reply = self.read()
        if not isinstance(reply, dict) or not isinstance(reply.get("pid"), int):
            raise ProtocolError(f"expected {{'pid': N}} after the handshake, got {reply!r}")
        return int(reply["pid"])

    def command(self, msg: Mapping[str, Any]) -> Reply:
        """Send a command; collect emits/logs/errors up to ``sync``, answering
        task ids where the child asks for them."""
        self.send(dict(msg))
        reply = Reply()
        while True:
            m = self.read()
            if not isinstance(m, dict):
                raise ProtocolError(f"expected a command object from the child, got {m!r}")
            kind = m.get("command")
            if kind == "sync":
                return reply
            reply.messages.append(m)
            if kind == "emit":
                reply.emits.append(m)
                if m.get("need_task_ids", True) is not False:
                    self.send(self.task_ids)
                    self.task_id_replies += 1
            elif kind == "log":
                reply.logs.append(m)
            elif kind == "error":
                reply.errors.append(m)
                return reply  # fatal: the child exits next
            else:
                raise ProtocolError(f"unexpected message from a spout: {m!r}")

    def next(self) -> Reply:
        return self.command({"command": "next"})

    def ack(self, message_id: str) -> Reply:
        return self.command({"command": "ack", "id": message_id})

    def fail(self, message_id: str) -> Reply:
        return self.command({"command": "fail", "id": message_id})

    def activate(self) -> Reply:
        return self.command({"command": "activate"})

    def deactivate(self) -> Reply:
        return self.command({"command": "deactivate"})

    def next_until(self, count: int, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """Call ``next`` until ``count`` emits arrived in total; :class:`ChildTimeout`
        if they do not within ``timeout`` (default: the read deadline)."""
        emits: list[dict[str, Any]] = []
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while len(emits) < count:
            if time.monotonic() > deadline:
                raise ChildTimeout(f"only {len(emits)} of {count} emits before the deadline")
            r = self.next()
            if r.errors:
                raise ProtocolError(f"child reported an error: {r.errors[0].get('msg')}")
            emits.extend(r.emits)
        return emits


def child_command(python: str, config: str | Path, *extra: str) -> list[str]:
    """``python -m kinesis_spout.multilang --config <config> ...``."""
    return [python, "-m", "kinesis_spout.multilang", "--config", str(config), *extra]


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment for the child: the caller's, minus ``KINESIS_SPOUT_*``
    variables (they would override the config file); from a source checkout,
    the checkout comes first on ``PYTHONPATH`` so the child runs the same code
    as the caller whatever its working directory."""
    env = dict(os.environ if base is None else base)
    for key in [k for k in env if k.startswith("KINESIS_SPOUT_")]:
        del env[key]
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    env.setdefault("AWS_ACCESS_KEY_ID", "test")
    env.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    return env
