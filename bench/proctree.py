"""CPU time of a child's whole process tree (Linux ``/proc``; psutil is not needed).

``getrusage(RUSAGE_CHILDREN)`` counts a descendant only once it, and every process
between it and us, has been waited for. Two kinds of process escape it in the Spark
job's tree: PySpark's worker daemon ignores SIGCHLD, so the kernel reaps its Python
workers and their CPU time is added nowhere; and a process whose parent exits first
is reparented away from the tree. :class:`TreeCpu` therefore samples ``/proc`` every
``interval`` seconds while the child runs, and the tree's CPU time is

    the RUSAGE_CHILDREN delta around the run
    + for each process of those two kinds, its last sampled CPU (own and reaped children's).

Only the CPU such a process spends after its last sample is missed (at most
``interval`` each). :meth:`TreeCpu.sampled` is the sum of every process's own CPU as
sampled (no rusage): what a window inside the run (from one instant to another) spent.
:class:`CpuTrace` keeps a CPU counter as a series over time (the emulator's process,
the whole machine: beside a run), for windows named only once the run has printed them.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

TICKS = os.sysconf("SC_CLK_TCK")
SIGCHLD_BIT = 1 << (17 - 1)  # SIGCHLD is 17 on Linux; SigIgn is a mask of 1 << (n - 1)


@dataclass(frozen=True, slots=True)
class ProcSample:
    """One process as ``/proc/<pid>/stat`` shows it."""

    pid: int
    ppid: int
    start: str
    """Start time in clock ticks since boot: with the pid, names the process (pids are reused)."""
    own: float
    """CPU seconds of the process itself (user + system, every thread)."""
    reaped: float
    """CPU seconds of its children that it has waited for (``cutime`` + ``cstime``)."""


def read_stat(pid: int) -> ProcSample | None:
    """The process ``pid`` now, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read()
    except OSError:
        return None
    f = text.rpartition(b")")[2].split()  # the fields after the command name
    return ProcSample(
        pid,
        int(f[1]),
        f[19].decode(),
        (int(f[11]) + int(f[12])) / TICKS,
        (int(f[13]) + int(f[14])) / TICKS,
    )


def ignores_sigchld(pid: int) -> bool:
    """True if ``pid`` ignores SIGCHLD (its children are reaped by the kernel, uncounted)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & SIGCHLD_BIT)
    except OSError:
        pass
    return False


def descendants(root: int, procs: dict[int, ProcSample]) -> list[ProcSample]:
    """``root`` and every process below it in ``procs`` (pid -> sample)."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in procs:
            found.append(procs[pid])
        todo.extend(children.get(pid, ()))
    return found


def all_processes() -> dict[int, ProcSample]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (s := read_stat(int(name))) is not None:
            out[s.pid] = s
    return out


def _rusage_children() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


class TreeCpu:
    """Samples the tree under ``root`` (a child of this process) from a thread::

        with TreeCpu(proc.pid) as cpu:
            ...  # wait for proc (proc.wait() reaps it)
        cpu.seconds  # the whole tree's CPU time (see the module docstring)

    Start it right after the child is launched, and leave the block after the child was
    waited for. No other child of this process may end meanwhile (its CPU would count).
    """

    def __init__(self, root: int, interval: float = 0.2) -> None:
        self.root = root
        self.seconds = 0.0
        self._last: dict[tuple[int, str], ProcSample] = {}
        self._first_parent: dict[tuple[int, str], int] = {}
        self._lost: set[tuple[int, str]] = set()
        self._lock = threading.Lock()
        self._trace = CpuTrace(self.sampled, interval)
        self._rusage0 = 0.0

    def __enter__(self) -> Self:
        self._rusage0 = _rusage_children()
        self._trace.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._trace.__exit__(exc_type, exc, tb)
        lost = sum(self._last[k].own + self._last[k].reaped for k in self._lost)
        self.seconds = _rusage_children() - self._rusage0 + lost

    def sample(self) -> None:
        """Read the tree now: new processes, their CPU so far, which ones are lost."""
        procs = all_processes()
        with self._lock:
            for s in descendants(self.root, procs):
                key = (s.pid, s.start)
                self._last[key] = s
                parent = self._first_parent.setdefault(key, s.ppid)
                if key not in self._lost and ignores_sigchld(parent):
                    self._lost.add(key)
            for key in self._last:  # reparented: its parent exited without waiting for it
                now = procs.get(key[0])
                if now is not None and now.start == key[1]:
                    self._last[key] = now
                    if now.ppid != self._first_parent[key]:
                        self._lost.add(key)

    def sampled(self) -> float:
        """The own CPU seconds of every process seen so far, sampled now."""
        self.sample()
        with self._lock:
            return sum(s.own for s in self._last.values())


def process_cpu(pid: int) -> Callable[[], float | None]:
    """The own CPU seconds of ``pid`` (every thread), read now; None once it is gone."""

    def read() -> float | None:
        s = read_stat(pid)
        return s.own if s is not None else None

    return read


def machine_cpu() -> float | None:
    """The machine's busy CPU seconds since boot, over every core (``/proc/stat``: all
    but idle and iowait; steal included, as the job could not use it either)."""
    with open("/proc/stat", "rb") as fh:
        ticks = [int(x) for x in fh.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / TICKS


class CpuTrace:
    """A CPU counter (:func:`process_cpu`, :func:`machine_cpu`) sampled with the wall
    clock from a thread, so the CPU of a window named only afterwards can be read::

        with CpuTrace(process_cpu(server.pid)) as trace:
            ...  # run something that keeps the server busy
        trace.between(t0, t1)  # its CPU seconds from t0 to t1 (``time.time()``)
    """

    def __init__(self, read: Callable[[], float | None], interval: float = 0.05) -> None:
        self.read = read
        self.interval = interval
        self.times: list[float] = []
        self.cpu: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-trace", daemon=True)

    def __enter__(self) -> Self:
        self._sample()
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        cpu = self.read()
        if cpu is not None:
            self.times.append(time.time())
            self.cpu.append(cpu)

    def at(self, t: float) -> float:
        """The counter's CPU seconds at ``t``, linear between the samples around it."""
        i = bisect_left(self.times, t)
        if i == 0:
            return self.cpu[0]
        if i == len(self.times):
            return self.cpu[-1]
        t0, t1, c0, c1 = self.times[i - 1], self.times[i], self.cpu[i - 1], self.cpu[i]
        return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1

    def between(self, start: float, end: float) -> float:
        return self.at(end) - self.at(start)
