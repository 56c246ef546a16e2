"""The chaos plan: what to do (records, kills, seed, fault rates, job settings), the
records and poison set and the moments of the kills, all derived from the seed."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devkit.chaos_process import make_payload, record_id
from kinesis_spout.config import SpoutConfig
from kinesis_spout.config.load import to_toml
from kinesis_spout.errors import ConfigError, KinesisSpoutError
from kinesis_spout.kinesis.aggregation import MAGIC

PROCESS_SPECS = {
    "per-record": "devkit.chaos_process:process",
    "fan-out": "devkit.chaos_process:fan_out_job",
}
"""The job's processing per ``ChaosPlan.processing``."""
ZK_ROOT = "/chaos"
JOB_NAME = "chaos"
POLL_SECONDS = 0.2
"""How often the orchestrator looks at the sink and the job."""

JOB_KEYS = (
    "stream_name",
    "job_name",
    "region",
    "endpoint_url",
    "checkpoint_store",
    "dead_letter",
    "sink",
    "records_per_call",
    "batch_size",
    "batch_max_wait",
    "max_in_flight",
    "retry_limit",
    "checkpoint_interval",
    "stop_when_idle",
    "empty_shard_backoff",
    "message_timeout",
    "read_on",
)
"""The config keys the chaos run writes into the job's TOML file (the rest are defaults)."""


class ChaosError(KinesisSpoutError):
    """A chaos run could not be carried out (a server, the job or a timeout)."""


# --- the plan -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChaosPlan:
    """Everything a chaos run does, from one seed."""

    records: int = 100_000
    """Records put, each with a unique id."""
    kills: int = 5
    """SIGKILLs of the job's process group (each followed by a restart)."""
    seed: int = 1
    """Seeds the poison set, the kill moments and the proxy's faults."""
    shards: int = 4
    poison_rate: float = 0.01
    """Fraction of records whose processing raises on every delivery."""
    record_bytes: int = 200
    zk_restarts: int = 1
    """Times ZooKeeper is stopped and started again on the same port and data."""
    zk_down_seconds: float = 4.0
    """How long ZooKeeper stays stopped each time."""
    throttle: float = 0.05
    """Proxy: share of Kinesis calls answered with a throttling error."""
    error: float = 0.05
    """Proxy: share answered with a 500 InternalFailure."""
    drop: float = 0.02
    """Proxy: share whose connection is cut (before or after forwarding)."""
    expire: float = 0.0
    """Proxy: share of GetRecords answered ExpiredIteratorException."""
    records_per_call: int = 1_000
    """GetRecords ``Limit``: smaller means more Kinesis calls for the proxy to disturb."""
    batch_size: int = 2_000
    batch_max_wait: float = 0.5
    max_in_flight: int = 500
    """Per shard (the job's ``max_in_flight``)."""
    retry_limit: int = 3
    checkpoint_interval: float = 1.0
    message_timeout: float = 30.0
    stop_when_idle: float = 3.0
    """The last run stops after this long with nothing to do."""
    kill_jitter: float = 1.0
    """A kill comes up to this many seconds after its moment is reached."""
    timeout: float = 1_800.0
    """The whole run (servers, puts, jobs) must finish within this many seconds."""
    max_job_failures: int = 5
    """Job exits with code 1 (a failure the job gave up on) restarted before the run aborts."""
    master: str = "local[2]"
    read_on: str = "executors"
    """Where the job reads Kinesis (the job's ``read_on``): ``executors``, the one read path."""
    processing: str = "per-record"
    """``per-record`` (the chaos function) or ``fan-out`` (each record split into words,
    anchored with the acker, written by the Parquet sink and counted by a word-count sink)."""
    kpl: bool = False
    """Put most records as KPL aggregates of 2-50 user records, with some empty
    aggregates and a few corrupt ones (handed on whole) among them."""
    kill_worker_records: int = 0
    """Records whose processing ends its Python worker on every delivery (dead-lettered
    after ``retry_limit`` retries, like poison)."""

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, allowed: str) -> None:
            if not ok:
                raise ConfigError(name, getattr(self, name), allowed)

        need(self.records >= 100, "records", "an integer >= 100")
        need(self.kills >= 0, "kills", "an integer >= 0")
        need(1 <= self.shards <= 64, "shards", "between 1 and 64")
        need(0.0 <= self.poison_rate < 0.5, "poison_rate", "a fraction in [0, 0.5)")
        need(32 <= self.record_bytes <= 1_000_000, "record_bytes", "between 32 and 1000000")
        need(self.zk_restarts >= 0, "zk_restarts", "an integer >= 0")
        need(self.zk_down_seconds >= 0, "zk_down_seconds", "a number of seconds >= 0")
        for name in ("throttle", "error", "drop", "expire"):
            need(0.0 <= getattr(self, name) <= 1.0, name, "a probability between 0 and 1")
        rates = self.throttle + self.error + self.drop + self.expire
        need(rates <= 1.0, "throttle", f"rates summing to at most 1 (they sum to {rates:g})")
        need(self.batch_size >= 1, "batch_size", "an integer >= 1")
        need(self.max_in_flight >= 1, "max_in_flight", "an integer >= 1")
        need(self.retry_limit >= 0, "retry_limit", "an integer >= 0")
        need(self.kill_jitter >= 0, "kill_jitter", "a number of seconds >= 0")
        need(self.timeout > 0, "timeout", "a number of seconds > 0")
        need(self.max_job_failures >= 0, "max_job_failures", "an integer >= 0")
        need(self.read_on == "executors", "read_on", "executors")
        need(self.processing in PROCESS_SPECS, "processing", " or ".join(PROCESS_SPECS))
        most = self.records // 10
        need(0 <= self.kill_worker_records <= most, "kill_worker_records", f"between 0 and {most}")

    @property
    def fault_rate(self) -> float:
        """Share of Kinesis calls the proxy does not answer normally."""
        return self.throttle + self.error + self.drop + self.expire

    @property
    def duplicate_bound(self) -> int:
        """The bound on duplicates: ``kills x max_in_flight x shards`` (a shard
        hands out at most ``max_in_flight`` records after its saved checkpoint)."""
        return self.kills * self.max_in_flight * self.shards


@dataclass(frozen=True, slots=True)
class ChaosRecords:
    """The records of a plan: ids in put order, the poison ones and the killers; with
    ``kpl_seed``, they are put as KPL aggregates (see :func:`kpl_items`)."""

    ids: tuple[str, ...]
    poison: frozenset[str]
    killers: frozenset[str] = frozenset()
    kpl_seed: int | None = None

    @property
    def failing(self) -> frozenset[str]:
        """Records that never process ok: poison and killers (all dead-lettered)."""
        return self.poison | self.killers

    def payload(self, rid: str, size: int) -> bytes:
        return make_payload(rid, rid in self.poison, size, kill=rid in self.killers)

    def items(self, size: int) -> Iterator[tuple[str, bytes]]:
        """``(partition key, data)`` per Kinesis record, in put order."""
        if self.kpl_seed is not None:
            yield from kpl_items(self, size, random.Random(f"kpl-{self.kpl_seed}"))
            return
        for rid in self.ids:
            yield rid, self.payload(rid, size)


def make_records(plan: ChaosPlan) -> ChaosRecords:
    """Ids ``chaos-0000000`` ... and seeded samples of them: ``poison_rate`` poison, then
    ``kill_worker_records`` killers among the others."""
    ids = tuple(record_id(i) for i in range(plan.records))
    n_poison = round(plan.records * plan.poison_rate)
    rng = random.Random(f"poison-{plan.seed}")
    poison = frozenset(rng.sample(ids, n_poison))
    rest = [i for i in ids if i not in poison]
    killers = frozenset(random.Random(f"kill-{plan.seed}").sample(rest, plan.kill_worker_records))
    return ChaosRecords(ids, poison, killers, plan.seed if plan.kpl else None)


EMPTY_AGGREGATE = MAGIC + hashlib.md5(b"").digest()
"""A KPL aggregate that holds no user record (the reader skips it)."""


def kpl_items(records: ChaosRecords, size: int, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """The records as the KPL would put them: ~90% of them in aggregates of 2-50 user
    records, the rest plain; an empty aggregate after ~2% of the Kinesis records; ~0.2% of
    the user records alone in a corrupt aggregate (the magic, the payload, a wrong
    checksum: handed on whole)."""
    from kinesis_spout.testing.streams import kpl_aggregate

    ids, i = records.ids, 0
    while i < len(ids):
        if rng.random() < 0.02:
            yield f"empty-{i}", EMPTY_AGGREGATE
        rid = ids[i]
        if rng.random() < 0.002:
            yield rid, MAGIC + records.payload(rid, size) + b"\0" * 16
            i += 1
            continue
        n = rng.randint(2, 50) if rng.random() < 0.9 else 1
        group = ids[i : i + n]
        i += len(group)
        if len(group) == 1:
            yield rid, records.payload(rid, size)
            continue
        yield kpl_aggregate((member, records.payload(member, size)) for member in group)


@dataclass(frozen=True, slots=True)
class Schedule:
    """When the disruptions come, as sink row counts (plus a kill's extra delay)."""

    kill_rows: tuple[int, ...]
    kill_delays: tuple[float, ...]
    zk_rows: tuple[int, ...]


def make_schedule(plan: ChaosPlan, good_records: int) -> Schedule:
    """Kill moments spread over the run: one uniform draw in each of ``kills``
    equal slices of 8%..90% of the good records (those that reach the sink);
    ZooKeeper restarts uniform in 25%..75%."""
    rng = random.Random(f"schedule-{plan.seed}")
    lo, hi = 0.08, 0.90
    width = (hi - lo) / max(plan.kills, 1)
    kill_rows = tuple(
        max(1, int(good_records * rng.uniform(lo + i * width, lo + (i + 1) * width)))
        for i in range(plan.kills)
    )
    delays = tuple(rng.uniform(0.0, plan.kill_jitter) for _ in range(plan.kills))
    zk_rows = tuple(
        sorted(max(1, int(good_records * rng.uniform(0.25, 0.75))) for _ in range(plan.zk_restarts))
    )
    return Schedule(kill_rows, delays, zk_rows)


def job_config(plan: ChaosPlan, *, stream: str, endpoint: str, zk_url: str, workdir: Path) -> str:
    """The job's TOML file for this plan (validated through :class:`SpoutConfig`)."""
    cfg = SpoutConfig(
        stream_name=stream,
        job_name=JOB_NAME,
        endpoint_url=endpoint,
        checkpoint_store=zk_url,
        dead_letter=str(workdir / "dead-letter"),
        sink=f"parquet://{workdir / 'sink'}",
        records_per_call=plan.records_per_call,
        batch_size=plan.batch_size,
        batch_max_wait=plan.batch_max_wait,
        max_in_flight=plan.max_in_flight,
        retry_limit=plan.retry_limit,
        checkpoint_interval=plan.checkpoint_interval,
        stop_when_idle=plan.stop_when_idle,
        empty_shard_backoff=0.2,
        message_timeout=plan.message_timeout,
        read_on=plan.read_on,
    )
    spec = PROCESS_SPECS[plan.processing]
    return f'# chaos run, seed {plan.seed}\nprocess = "{spec}"\n' + to_toml(cfg, JOB_KEYS)
