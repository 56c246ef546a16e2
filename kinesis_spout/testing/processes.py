"""A local server as a managed child process (start, wait until ready, stop, log tail),
the port helpers the test servers share, and waiting with a deadline for what another
process does: a line it prints (:class:`OutputLines`) or any condition (:func:`wait_until`)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from kinesis_spout.errors import KinesisSpoutError

LOOPBACK = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parents[2]


class BackendUnavailableError(KinesisSpoutError):
    """A local backend could not be found or did not start."""


_PORTS = random.Random()  # its own seed: tests that seed the global random share no ports
_LOWEST_PORT = 10_000


def _ephemeral_start() -> int:
    """Where the kernel's ephemeral ports begin (Linux's setting; else 32768, below the
    49152 of macOS and Windows)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    """A TCP port on loopback that is free right now, below the kernel's ephemeral range:
    the kernel never hands it to another process by itself (a Spark job's accumulator
    server, a JVM, a client's connection), so a server started on it, or a connection
    meant to be refused there, meets no one else."""
    top = _ephemeral_start()
    for _ in range(100 if top > _LOWEST_PORT else 0):
        port = _PORTS.randrange(_LOWEST_PORT, top)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((LOOPBACK, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def free_port_pair(attempts: int = 50) -> int:
    """A port ``p`` such that ``p`` and ``p + 1`` are both free right now, on every
    interface (for a server that also listens on the next port, as
    ``localstack/run_kinesis_mock.sh`` puts kinesis-mock's TLS port)."""
    for _ in range(attempts):
        with contextlib.ExitStack() as held:
            try:
                for port in (first := free_port(), first + 1):
                    s = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                    s.bind(("", port))
            except OSError:
                continue
            return first
    raise KinesisSpoutError(f"no two free ports in a row in {attempts} attempts")


def port_open(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def wait_until(
    cond: Callable[[], bool],
    timeout: float,
    what: str,
    seen: Callable[[], object] | None = None,
    poll: float = 0.05,
) -> None:
    """Return once ``cond()`` holds; after ``timeout`` seconds fail naming ``what`` was
    awaited and, with ``seen``, what was there instead."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            found = f"; saw {seen()!r}" if seen is not None else ""
            raise AssertionError(f"waited {timeout:.0f}s for {what}{found}")
        time.sleep(poll)


class OutputLines:
    """The lines a child writes to its text ``stdout`` pipe, read by a thread as they come,
    so a test can wait for a line with a deadline (a bare ``readline`` has none).

    Once this reads the pipe, use :meth:`text` rather than ``communicate``.
    """

    def __init__(self, proc: subprocess.Popen[str], name: str = "the process") -> None:
        if proc.stdout is None:
            raise ValueError("OutputLines needs a process started with stdout=PIPE")
        self.proc = proc
        self.name = name
        self._lines: list[str] = []
        self._ended = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(
            target=self._read, args=(proc.stdout,), name=f"output of {name}", daemon=True
        )
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        try:
            for line in stream:
                with self._cond:
                    self._lines.append(line)
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._ended = True
                self._cond.notify_all()

    def wait_for(self, text: str, timeout: float) -> str:
        """The first line containing ``text``, once printed; fails after ``timeout``
        seconds, or as soon as the output ends without it, with what was printed."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self._lines:
                    if text in line:
                        return line
                left = deadline - time.monotonic()
                if self._ended or left <= 0:
                    why = (
                        f"{self.name} ended its output (exit code {self.proc.poll()})"
                        if self._ended
                        else f"{self.name} is still running after {timeout:.0f}s"
                    )
                    tail = "".join(self._lines[-40:])
                    raise AssertionError(
                        f"waited for a line with {text!r}: {why}; it printed:\n{tail}"
                    )
                self._cond.wait(left)

    def text(self, timeout: float = 30.0) -> str:
        """Everything printed, once the output ended (the process exited)."""
        self._thread.join(timeout)
        with self._cond:
            return "".join(self._lines)


class ManagedProcess:
    """A child process with a log file, a readiness check and a clean stop."""

    name = "server"
    start_timeout = 60.0

    def __init__(self, workdir: str | Path | None = None) -> None:
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"ks-{self.name}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / f"{self.name}.log"

    # subclasses -------------------------------------------------------------
    def command(self) -> Sequence[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def ready(self) -> bool:
        raise NotImplementedError

    # lifecycle ------------------------------------------------------------
    def start(self) -> Self:
        if self.proc is not None and self.proc.poll() is None:
            return self
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            list(self.command()),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.environment(),
            cwd=self.workdir,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BackendUnavailableError(
                    f"{self.name} exited with {self.proc.returncode} while starting; "
                    f"log {self.log_path}:\n{self.tail_log()}"
                )
            if self.ready():
                return self
            time.sleep(0.05)
        self.stop()
        raise BackendUnavailableError(
            f"{self.name} did not become ready in {self.start_timeout:.0f}s; "
            f"log {self.log_path}:\n{self.tail_log()}"
        )

    def stop(self, kill: bool = False) -> None:
        """SIGTERM (SIGKILL with ``kill=True`` or after 10 s) and wait."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        sig = signal.SIGKILL if kill else signal.SIGTERM
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail_log(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
