"""The chaos run: local servers, the job under SIGKILLs and a ZooKeeper restart, then the audit."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devkit.chaos.auditor import KillSnapshot, read_dead_letter_dir, read_sink, replay_windows
from devkit.chaos.plan import (
    JOB_NAME,
    POLL_SECONDS,
    ZK_ROOT,
    ChaosError,
    ChaosPlan,
    ChaosRecords,
    Schedule,
    job_config,
    make_records,
    make_schedule,
)
from devkit.chaos.process import JobProcess, job_command
from devkit.chaos.report import ChaosResult, RunFacts, build_result
from devkit.chaos.timeline import EventKind, TimelineRecorder
from devkit.chaos.watch import (
    CheckpointWatcher,
    SinkProgress,
    check_monotonic,
    dead_letter_lines,
)
from devkit.chaos.zkrestart import ZooKeeperRestart

KILL_TRIES = 5
"""New sink files a kill looks at, at most, for one whose rows its replay window holds
(:meth:`_ChaosLoop._pause_in_a_window`)."""


class _ChaosLoop:
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
        files = self._pause_in_a_window()
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
            f"{snap.rows} sink rows, at the {_nth(files)} new sink file; restarting"
        )
        self.job = self._launch()

    def _pause_in_a_window(self) -> int:
        """Stop the job (SIGSTOP) just after a task wrote sink rows and before its
        micro-batch's checkpoint covers them, so the kill that follows replays something.

        A micro-batch that fills only part of a shard's window checkpoints at once, within
        milliseconds of its sink files: a loaded machine can see the file only after the
        save. So the stopped job is looked at: if the new files' rows are all at or before
        the stored checkpoints, the job goes on and the next file is tried, up to
        :data:`KILL_TRIES` files (while ZooKeeper is down it is not looked at). Returns
        how many new files were looked at."""
        tried = 0
        while True:
            tried += 1
            new = self._wait_for_new_rows()
            self.job.pause()
            if not new or tried == KILL_TRIES or self._zk_down:
                return tried
            time.sleep(0.2)  # let ZooKeeper apply a write that was on the wire
            if self._replays(new):
                return tried
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


def _nth(n: int) -> str:
    return {1: "first", 2: "second", 3: "third"}.get(n, f"{n}th")


def _say(text: str) -> None:
    print(text, flush=True)


def run_chaos(
    plan: ChaosPlan, workdir: str | Path, say: Callable[[str], None] = _say
) -> ChaosResult:
    """Carry out ``plan`` against local servers in ``workdir``, then audit.

    Starts moto, ZooKeeper and a fault proxy in front of moto; creates the
    stream and puts the records (straight to moto); runs the Spark job with
    the ZooKeeper store through the proxy, SIGKILLing its process group at the
    planned moments and restarting it, stopping ZooKeeper for a few seconds
    once; lets the last run drain (``stop_when_idle``) and audits the sink, the
    dead letters and the checkpoints. Raises :class:`ChaosError` when the run
    itself cannot be carried out (the audit's findings are in the result).
    """
    from devkit.faultproxy import FaultProxy
    from kinesis_spout.testing.servers import MotoServer, ZooKeeperServer

    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")):
        os.environ.setdefault(name, value)
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    clock = _Laps(time.monotonic())
    with contextlib.ExitStack() as stack:
        moto = stack.enter_context(MotoServer(workdir=work / "moto"))
        zk = stack.enter_context(ZooKeeperServer(workdir=work / "zookeeper"))
        proxy = stack.enter_context(FaultProxy(moto.endpoint_url, seed=plan.seed))
        clock.lap("setup")
        say(f"moto {moto.endpoint_url}, ZooKeeper {zk.hosts}, fault proxy {proxy.endpoint_url}")
        stream = f"chaos-{plan.seed}"
        records, sequences = _produce(plan, moto.endpoint_url, stream, clock, say)
        last_seq = {shard: max(seqs) for shard, seqs in sequences.items()}
        config_path = work / "chaos-job.toml"
        config_path.write_text(
            job_config(
                plan,
                stream=stream,
                endpoint=proxy.endpoint_url,
                zk_url=zk.url(ZK_ROOT),
                workdir=work,
            )
        )
        proxy.set_rates(
            throttle=plan.throttle, error=plan.error, drop=plan.drop, expire=plan.expire
        )
        watcher = stack.enter_context(CheckpointWatcher(zk.hosts, f"{ZK_ROOT}/{JOB_NAME}/{stream}"))
        loop = _run_loop(plan, records, last_seq, config_path, zk, watcher, stack, clock, say)
        facts = _facts(work, records, sequences, loop, watcher, proxy, clock.origin)
        clock.lap("audit")
    clock.phases["total"] = round(time.monotonic() - clock.origin, 1)
    return build_result(plan, facts, clock.phases)


class _Laps:
    """Seconds per phase of the run (``setup``, ``produce``, ``run``, ``drain``, ``audit``)."""

    def __init__(self, origin: float) -> None:
        self.origin = origin
        self.last = origin
        self.phases: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(now - self.last, 1)
        self.last = now


def _produce(
    plan: ChaosPlan, endpoint: str, stream: str, clock: _Laps, say: Callable[[str], None]
) -> tuple[ChaosRecords, dict[str, list[int]]]:
    """Create the stream, put the plan's records; returns them and the sequence numbers put
    per shard, in put order."""
    from kinesis_spout.testing.streams import create_stream, emulator_client, put_records

    records = make_records(plan)
    client = emulator_client(endpoint)
    create_stream(client, stream, plan.shards)
    sequences: dict[str, list[int]] = {}
    for shard, seq in put_records(client, stream, records.items(plan.record_bytes)):
        sequences.setdefault(shard, []).append(int(seq))
    clock.lap("produce")
    say(
        f"put {plan.records} records ({len(records.poison)} poison, {len(records.killers)} "
        f"killing their worker{', as KPL aggregates' if plan.kpl else ''}) into {plan.shards} "
        f"shards of {stream} in {clock.phases['produce']:.1f}s"
    )
    return records, sequences


def _run_loop(
    plan: ChaosPlan,
    records: ChaosRecords,
    last_seq: Mapping[str, int],
    config_path: Path,
    zk: Any,
    watcher: CheckpointWatcher,
    stack: contextlib.ExitStack,
    clock: _Laps,
    say: Callable[[str], None],
) -> _ChaosLoop:
    """Run the job under the planned kills until a run drains; returns the finished loop."""
    from kinesis_spout.spark.launch.submit import job_environment

    started_run = clock.last
    loop = _ChaosLoop(
        plan,
        make_schedule(plan, plan.records - len(records.failing)),
        command=job_command(config_path, plan.master),
        env=job_environment(master=plan.master),
        work=config_path.parent,
        zk=zk,
        watcher=watcher,
        last_seq=last_seq,
        stack=stack,
        origin=clock.origin,
        say=say,
    )
    loop.run(clock.origin + plan.timeout)
    clock.phases["run"] = round(loop.last_start - started_run, 1)
    clock.phases["drain"] = round(time.monotonic() - loop.last_start, 1)
    clock.last = time.monotonic()
    say(f"run {loop.runs} drained and stopped; auditing")
    return loop


def _facts(
    work: Path,
    records: ChaosRecords,
    sequences: Mapping[str, Sequence[int]],
    loop: _ChaosLoop,
    watcher: CheckpointWatcher,
    proxy: Any,
    origin: float,
) -> RunFacts:
    """Gather what the run did and left behind (the watcher is stopped here)."""
    final = watcher.read_now()
    watcher.stop()
    seen = watcher.observations()
    return RunFacts(
        records=records,
        last_seq=dict(loop.last_seq),
        final=final,
        monotonic=check_monotonic(seen, watcher.corrupt),
        rows=read_sink(work / "sink"),
        dead_letters=read_dead_letter_dir(work / "dead-letter"),
        kills=tuple(loop.kills),
        zk_unreachable=tuple(r.unreachable for r in loop.zk_restarts),
        runs=loop.runs,
        failures=tuple(loop.failures),
        drain_reruns=loop.drain_reruns,
        faults=proxy.injected,
        requests=sum(proxy.requests.values()),
        timeline=loop.timeline.timeline(
            checkpoints=seen,
            watch_offset=watcher.started_at - origin,
            sequences=sequences,
            poison=len(records.failing),
        ),
        kinesis_records=sum(len(seqs) for seqs in sequences.values()),
    )


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
