"""The chaos run: local servers, the job under SIGKILLs and a ZooKeeper restart, then the audit."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devkit.chaos.auditor import read_dead_letter_dir, read_sink
from devkit.chaos.loop import ChaosLoop
from devkit.chaos.plan import (
    JOB_NAME,
    ZK_ROOT,
    ChaosPlan,
    ChaosRecords,
    job_config,
    make_records,
    make_schedule,
)
from devkit.chaos.process import job_command
from devkit.chaos.report import ChaosResult, RunFacts, build_result
from devkit.chaos.watch import (
    CheckpointWatcher,
    check_monotonic,
)


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
) -> ChaosLoop:
    """Run the job under the planned kills until a run drains; returns the finished loop."""
    from kinesis_spout.spark.submit import job_environment

    started_run = clock.last
    loop = ChaosLoop(
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
    loop: ChaosLoop,
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
