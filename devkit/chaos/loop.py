"""The chaos run's loop: the job run, SIGKILLed at the planned moments and restarted, and
ZooKeeper restarted once, until a run drains (:class:`ChaosLoop`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devkit.chaos.auditor import KillSnapshot, read_sink, replay_windows
from devkit.chaos.plan import POLL_SECONDS, ChaosError, ChaosPlan, Schedule
from devkit.chaos.process import JobProcess
from devkit.chaos.timeline import EventKind, TimelineRecorder
from devkit.chaos.watch import CheckpointWatcher, SinkProgress, dead_letter_lines
from devkit.chaos.zkrestart import ZooKeeperRestart

KILL_TRIES = 5
"""New sink files a kill looks at, at most, for one whose rows its replay window holds
(:meth:`ChaosLoop._pause_in_a_window`)."""


MAX_PAUSE = 2.0
"""Seconds the job may stay stopped while its new sink file is looked at and still be
resumed (its ZooKeeper session lapses after 10 s of silence)."""


class ChaosLoop:
    """Runs the job, restarts it after each kill or failure, until a run drains.

    Each poll (every :data:`POLL_SECONDS`) looks at the sink and the job: a
    kill is due once the sink has reached its row count and the current run
    has written something; so is a ZooKeeper restart. After a kill the
    snapshot of what is durable (sink files, dead-letter lines, stored
    checkpoints) is taken before the next run starts.
    """

    def __init__(
        self,
        plan: ChaosPlan,
        schedule: Schedule,
        *,
        command: Sequence[str],
        env: Mapping[str, str],
        work: Path,
        zk: Any,
        watcher: CheckpointWatcher,
        last_seq: Mapping[str, int],
        stack: contextlib.ExitStack,
        origin: float,
        say: Callable[[str], None],
    ) -> None:
        self.plan = plan
        self.command = list(command)
        self.env = dict(env)
        self.work = work
        self.zk = zk
        self.watcher = watcher
        self.last_seq = dict(last_seq)
        self.stack = stack
        self.origin = origin
        self.say = say
        self.progress = SinkProgress(work / "sink")
        self.kills_due = list(zip(schedule.kill_rows, schedule.kill_delays, strict=True))
        self.zk_due = list(schedule.zk_rows)
        self.runs = 0
        self.kills: list[KillSnapshot] = []
        self.failures: list[str] = []
        """Runs that exited with code 1 on their own (restarted, like a supervisor would)."""
        self.zk_restarts: list[ZooKeeperRestart] = []
        self.drain_reruns = 0
        """Runs started after a clean exit that left a checkpoint behind (ZooKeeper was down)."""
        self.last_start = origin
        self.timeline = TimelineRecorder()
        """Sink rows and dead letters per poll, and the events (for ``--plot``)."""
        self._run_wrote = False
        self.job = self._launch()
        self._files_at_start = self.progress.files

    def run(self, deadline: float) -> None:
        while True:
            if time.monotonic() > deadline:
                raise ChaosError(
                    f"chaos run did not finish within {self.plan.timeout:.0f}s "
                    f"(run {self.runs}, {self.progress.rows} sink rows); job log "
                    f"{self.job.log_path}:\n{self.job.tail()}"
                )
            time.sleep(POLL_SECONDS)
            rows = self.progress.refresh()
            dead = sum(dead_letter_lines(self.work / "dead-letter").values())
            self.timeline.sample(time.monotonic() - self.origin, rows, dead)
            code = self.job.poll()
            if code is not None:
                if self._exited(code):
                    break
                continue
            wrote = bool(self.progress.files - self._files_at_start)
            if wrote and not self._run_wrote:
                self._run_wrote = True
                self.timeline.event(self.timeline.last_at, EventKind.FIRST_ROWS, f"run {self.runs}")
            if self.kills_due and rows >= self.kills_due[0][0] and wrote:
                self._kill(self.kills_due.pop(0)[1])
            elif self.zk_due and rows >= self.zk_due[0] and wrote and not self._zk_down:
                self.zk_due.pop(0)
                restart = ZooKeeperRestart(self.zk, self.plan.zk_down_seconds, self.origin)
                self.zk_restarts.append(restart.start())
                self.say(f"ZooKeeper stopped at {rows} sink rows")
        for restart in self.zk_restarts:
            restart.join()
            self.timeline.event(restart.stopped_at, EventKind.ZK_STOP)
            self.timeline.event(restart.stopped_at + restart.unreachable, EventKind.ZK_START)

    def _wait_for_new_rows(self, timeout: float = 5.0) -> frozenset[str]:
        """Until a sink file appears (at most ``timeout`` seconds): a task has just written
        rows that its micro-batch has not yet acked and checkpointed, so a kill now lands
        inside a replay window (a kill between micro-batches would replay nothing).
        Returns the new files (none: the timeout passed or the job ended)."""
        before = self.progress.files
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.job.poll() is None:
            self.progress.refresh()
            if self.progress.files - before:
                return self.progress.files - before
            time.sleep(0.005)
        return frozenset()

    @property
    def _zk_down(self) -> bool:
        return any(r.running for r in self.zk_restarts)

    def _launch(self) -> JobProcess:
        self.runs += 1
        job = JobProcess(self.command, self.env, self.work / f"job-{self.runs}.log").start()
        self.stack.callback(_kill_quietly, job)
        self.last_start = time.monotonic()
        self._files_at_start = self.progress.files
        self._run_wrote = False
        kind = EventKind.START if self.runs == 1 else EventKind.RESTART
        self.timeline.event(self.last_start - self.origin, kind, f"run {self.runs}")
        return job

    def _exited(self, code: int) -> bool:
        """The run ended on its own: True when the chaos run is over."""
        if code == 0:
            for restart in self.zk_restarts:
                restart.join()
            stored = {s: v.sequence for s, v in self.watcher.read_now().items()}
            if stored == self.last_seq or self.drain_reruns >= 2:
                self.timeline.event(time.monotonic() - self.origin, EventKind.DRAINED, "drained")
                return True
            # It stopped idle while ZooKeeper was away: its last checkpoint was not written.
            self.drain_reruns += 1
            self.say(f"run {self.runs} stopped with checkpoints behind; starting it again")
            self.job = self._launch()
            return False
        note = f"run {self.runs} exited with {code}: {_last_error(self.job)}"
        self.failures.append(note)
        self.timeline.event(time.monotonic() - self.origin, EventKind.FAILURE, f"run {self.runs}")
        self.say(f"job {note}; restarting")
        if code == 2 or len(self.failures) > self.plan.max_job_failures:
            raise ChaosError(f"the job keeps failing; log {self.job.log_path}:\n{self.job.tail()}")
        self.job = self._launch()
        return False

    def _kill(self, delay: float) -> None:
        time.sleep(delay)
        looked = self._pause_in_a_window()
        killed_at = time.monotonic() - self.origin
        self.job.kill()
        time.sleep(0.2)  # let ZooKeeper apply a write that was on the wire
        snap = KillSnapshot(
            index=len(self.kills) + 1,
            at=round(time.monotonic() - self.origin, 1),
            rows=self.progress.refresh(),
            sink_files=self.progress.files,
            dead_letter_lines=dead_letter_lines(self.work / "dead-letter"),
            checkpoints=self._stored(),
        )
        self.kills.append(snap)
        self.timeline.event(killed_at, EventKind.KILL, f"kill {snap.index}")
        self.say(
            f"kill {snap.index}: SIGKILL to run {self.runs} at {snap.at:.1f}s, "
            f"{snap.rows} sink rows ({looked}); restarting"
        )
        self.job = self._launch()

    def _pause_in_a_window(self) -> str:
        """Stop the job (SIGSTOP) just after a task wrote sink rows and before its
        micro-batch's checkpoint covers them, so the kill that follows replays something.

        A micro-batch that fills only part of a shard's window checkpoints at once, within
        milliseconds of its sink files: a loaded machine can see the file only after the
        save. So the stopped job is looked at: if the new files' rows are all at or before
        the stored checkpoints, the job goes on and the next file is tried, up to
        :data:`KILL_TRIES` files (while ZooKeeper is down it is not looked at, and a job
        stopped longer than :data:`MAX_PAUSE` is not resumed: its ZooKeeper session may
        have lapsed). Returns what was looked at, for the kill's line."""
        tried = 0
        while True:
            tried += 1
            new = self._wait_for_new_rows()
            self.job.pause()
            paused = time.monotonic()
            if not new:
                return "no new sink file"
            if self._zk_down:
                return "ZooKeeper down, not looked at"
            time.sleep(0.2)  # let ZooKeeper apply a write that was on the wire
            if self._replays(new):
                return f"in the window of new sink file {tried}"
            if tried == KILL_TRIES or time.monotonic() - paused > MAX_PAUSE:
                return f"no window found in {tried} new sink files"
            self.job.resume()

    def _replays(self, files: frozenset[str]) -> bool:
        """Whether a kill now would replay a row of the sink files ``files``."""
        now = KillSnapshot(0, 0.0, 0, files, {}, self._stored())
        rows = read_sink(self.work / "sink", names=files)
        return replay_windows([now], rows, []).total > 0

    def _stored(self) -> dict[str, int | tuple[int, int]]:
        """The stored checkpoint of every shard that has one (waits while ZooKeeper is
        down)."""
        return {s: v.key for s, v in self.watcher.read_now().items() if v.sequence is not None}


def _last_error(job: JobProcess) -> str:
    """The job's last error line (``kinesis-spout job: ...``), or the log's last line."""
    tail = job.tail(200).splitlines()
    for line in reversed(tail):
        if "kinesis-spout job:" in line or "Error" in line:
            return line.strip()[:300]
    return tail[-1].strip()[:300] if tail else "(no output)"


def _kill_quietly(job: JobProcess) -> None:
    if job.poll() is None:
        with contextlib.suppress(Exception):
            job.kill(10)
