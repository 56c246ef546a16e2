"""Chaos runs: the Spark job under SIGKILLs, a ZooKeeper restart, Kinesis faults and
poison records, then an audit of what came out.

Used by ``bench/chaos.py`` (the full run whose figures are in
``docs/guarantees.md``) and by ``tests/integration/chaos`` (a short run on every
change). The pieces, each usable alone:

* :class:`ChaosPlan`: what to do (records, kills, seed, fault rates, job settings);
* :func:`make_records`, :func:`make_schedule`: the ids, the poison set and the
  moments of the kills and of the ZooKeeper restart, all from the seed;
* :class:`SinkProgress`: rows in the job's Parquet sink so far (file footers only);
* :class:`CheckpointWatcher`: a kazoo client that records every checkpoint value
  it sees in ZooKeeper (polling and data watches), and :func:`check_monotonic`;
* :class:`JobProcess`: ``spark-submit`` in a session of its own, killed as a
  group with SIGKILL, with a check that nothing of it survived;
* :func:`tally` and :func:`replay_windows`: the auditor's arithmetic;
* :func:`run_chaos`: all of it against real local servers.

What the auditor checks (:attr:`ChaosResult.problems` lists the guarantees that
did not hold, :attr:`ChaosResult.missed` the issue's stricter criteria that were
not met):

* **lost** = ids put - ids in the sink - ids dead-lettered: must be 0;
* **duplicates** = sink rows - distinct ids in the sink. Each kill replays, per
  shard, the records after the checkpoint stored at that moment; the rows of
  those records already in the sink form the kill's *replay window*. Every
  duplicate must lie in a replay window (``unexplained_duplicates`` = 0), no
  window of one shard may exceed ``max_in_flight``, and the total must be at
  most ``kills x max_in_flight x shards``;
* **poison**: every poison id dead-lettered, with its error and
  ``retry_limit + 1`` attempts, and never in the sink; dead-letter entries
  repeated by a replay are counted (``dead_letter_duplicates``, a *missed*
  criterion when not 0) and must lie in a replay window too;
* **checkpoints_monotonic**: ordered by the ZooKeeper transaction id of each
  write, no shard's checkpoint ever went backwards; at the end every shard's
  checkpoint is its last sequence number.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from kinesis_spout.config import SpoutConfig, to_toml
from kinesis_spout.errors import ConfigError, KinesisSpoutError
from kinesis_spout.examples.chaos_process import make_payload, parse_payload, record_id

PROCESS_SPEC = "kinesis_spout.examples.chaos_process:process"
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
)
"""The config keys the chaos run writes into the job's TOML file (the rest are defaults)."""


_kazoo_log = logging.getLogger(__name__ + ".kazoo")
"""The watcher's kazoo client logs here (ERROR and above by default: ZooKeeper
going away is part of the plan, not news)."""
if _kazoo_log.level == logging.NOTSET:
    _kazoo_log.setLevel(logging.ERROR)


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
    """The records of a plan: ids in put order and the poison ones."""

    ids: tuple[str, ...]
    poison: frozenset[str]

    def items(self, size: int) -> Iterator[tuple[str, bytes]]:
        """``(partition key, payload)`` per record, in put order."""
        for rid in self.ids:
            yield rid, make_payload(rid, rid in self.poison, size)


def make_records(plan: ChaosPlan) -> ChaosRecords:
    """Ids ``chaos-0000000`` ... and a seeded ``poison_rate`` sample of them."""
    ids = tuple(record_id(i) for i in range(plan.records))
    n_poison = round(plan.records * plan.poison_rate)
    rng = random.Random(f"poison-{plan.seed}")
    return ChaosRecords(ids, frozenset(rng.sample(ids, n_poison)))


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
    )
    return f'# chaos run, seed {plan.seed}\nprocess = "{PROCESS_SPEC}"\n' + to_toml(cfg, JOB_KEYS)


# --- watching the sink -------------------------------------------------------------------


class SinkProgress:
    """Rows written to a Parquet sink directory so far, from the file footers
    (each file is read once; files appear by atomic rename)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._rows: dict[str, int] = {}

    def refresh(self) -> int:
        """Look for new files; return the rows in all files."""
        import pyarrow.parquet as pq

        if self.directory.is_dir():
            for p in self.directory.glob("part-*.parquet"):
                if p.name not in self._rows:
                    self._rows[p.name] = int(pq.read_metadata(p).num_rows)
        return self.rows

    @property
    def rows(self) -> int:
        return sum(self._rows.values())

    @property
    def files(self) -> frozenset[str]:
        return frozenset(self._rows)


def dead_letter_lines(directory: str | Path) -> dict[str, int]:
    """Complete lines in each dead-letter file, by path relative to ``directory``."""
    base = Path(directory)
    if not base.is_dir():
        return {}
    return {str(p.relative_to(base)): p.read_bytes().count(b"\n") for p in base.rglob("*.jsonl")}


# --- watching the checkpoints ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckpointSeen:
    """One stored checkpoint value, as the watcher saw it."""

    shard_id: str
    zxid: int
    """The node's ``mzxid``: ZooKeeper's total order of writes."""
    version: int
    """The node's data version."""
    sequence: int | None
    sub_sequence: int
    shard_end: bool
    seen_at: float
    """Seconds since the watcher started."""
    via: str
    """``poll``, ``watch`` or ``read``."""

    @property
    def key(self) -> tuple[int, int]:
        return (-1 if self.sequence is None else self.sequence, self.sub_sequence)


@dataclass(frozen=True, slots=True)
class MonotonicReport:
    """The result of :func:`check_monotonic`."""

    monotonic: bool
    values_seen: int
    """Distinct stored values seen (by shard and zxid)."""
    shards: int
    violations: tuple[str, ...]


def check_monotonic(seen: Iterable[CheckpointSeen], corrupt: Sequence[str] = ()) -> MonotonicReport:
    """Per shard, ordered by zxid: the position never decreases, an ended shard
    stays ended, and the node is never re-created (its version only grows).
    ``corrupt``: values the watcher could not parse (each is a violation)."""
    by_shard: dict[str, dict[int, CheckpointSeen]] = defaultdict(dict)
    for s in seen:
        by_shard[s.shard_id].setdefault(s.zxid, s)
    violations = [f"unreadable checkpoint value: {c}" for c in corrupt]
    total = 0
    for shard, values in sorted(by_shard.items()):
        ordered = [values[z] for z in sorted(values)]
        total += len(ordered)
        for prev, cur in zip(ordered, ordered[1:], strict=False):
            if prev.shard_end and not cur.shard_end:
                violations.append(f"{shard}: shard end undone at zxid {cur.zxid}")
            if cur.sequence is not None and prev.sequence is not None and cur.key < prev.key:
                violations.append(
                    f"{shard}: checkpoint went back from {prev.key} (zxid {prev.zxid}) "
                    f"to {cur.key} (zxid {cur.zxid})"
                )
            if cur.version <= prev.version:
                violations.append(
                    f"{shard}: node re-created (version {prev.version} -> {cur.version} "
                    f"at zxid {cur.zxid})"
                )
    return MonotonicReport(not violations, total, len(by_shard), tuple(violations))


class CheckpointWatcher:
    """Records every checkpoint value of one stream that it sees in ZooKeeper.

    A thread polls the stream's shard nodes every ``interval`` seconds and a
    kazoo ``DataWatch`` on each node reports changes between polls. Values are
    keyed by the write's zxid, so the order of observation does not matter.
    ZooKeeper going away is expected: failed polls are counted and retried.
    """

    def __init__(self, hosts: str, stream_path: str, *, interval: float = 0.15) -> None:
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry

        self.stream_path = stream_path.rstrip("/")
        self.interval = interval
        self.poll_errors = 0
        self._client = KazooClient(
            hosts=hosts,
            timeout=10.0,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            logger=_kazoo_log,
        )
        self._seen: dict[tuple[str, int], CheckpointSeen] = {}
        self._corrupt: list[str] = []
        self._watched: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()

    def start(self, timeout: float = 30.0) -> Self:
        self._client.start(timeout=timeout)
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="chaos-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        with contextlib.suppress(Exception):
            self._client.stop()
        with contextlib.suppress(Exception):
            self._client.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- results --------------------------------------------------------------------
    def observations(self) -> list[CheckpointSeen]:
        with self._lock:
            return sorted(self._seen.values(), key=lambda s: (s.shard_id, s.zxid))

    @property
    def corrupt(self) -> list[str]:
        with self._lock:
            return list(self._corrupt)

    def report(self) -> MonotonicReport:
        return check_monotonic(self.observations(), self.corrupt)

    def read_now(self, timeout: float = 60.0) -> dict[str, CheckpointSeen]:
        """The stored checkpoint of every shard, read now (retried while
        ZooKeeper is unreachable, up to ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._read_all("read")
            except _NoNode:
                return {}
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise ChaosError(
                        f"cannot read checkpoints under {self.stream_path}: {exc!r}"
                    ) from None
                time.sleep(0.2)

    # --- internals ------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._read_all("poll")
            except _NoNode:
                pass
            except Exception:
                self.poll_errors += 1

    def _read_all(self, via: str) -> dict[str, CheckpointSeen]:
        from kazoo.exceptions import NoNodeError
        from kazoo.recipe.watchers import DataWatch

        try:
            children = self._client.get_children_async(self.stream_path).get(timeout=2.0)
        except NoNodeError:
            raise _NoNode from None
        out: dict[str, CheckpointSeen] = {}
        for shard in sorted(c for c in children if not c.startswith("@")):
            path = f"{self.stream_path}/{shard}"
            if shard not in self._watched:
                self._watched.add(shard)
                DataWatch(self._client, path, self._watch_callback(shard))
            try:
                data, stat = self._client.get_async(path).get(timeout=2.0)
            except NoNodeError:
                continue
            seen = self._record(shard, data, stat, via)
            if seen is not None:
                out[shard] = seen
        return out

    def _watch_callback(self, shard: str) -> Callable[[Any, Any, Any], bool]:
        def on_change(data: Any, stat: Any, event: Any) -> bool:
            if data is not None and stat is not None:
                self._record(shard, data, stat, "watch")
            return not self._stop.is_set()

        return on_change

    def _record(self, shard: str, data: bytes, stat: Any, via: str) -> CheckpointSeen | None:
        zxid = int(stat.mzxid)
        try:
            obj = json.loads(data)
            seq = obj["sequence"]
            seen = CheckpointSeen(
                shard,
                zxid,
                int(stat.version),
                None if seq is None else int(seq),
                int(obj.get("sub_sequence") or 0),
                bool(obj.get("shard_end")),
                time.monotonic() - self._started,
                via,
            )
        except (ValueError, TypeError, KeyError):
            with self._lock:
                note = f"{shard} zxid {zxid}: {data[:80]!r}"
                if note not in self._corrupt:
                    self._corrupt.append(note)
            return None
        with self._lock:
            self._seen.setdefault((shard, zxid), seen)
        return seen


class _NoNode(Exception):
    """The stream's checkpoint node does not exist (yet)."""


# --- the job process --------------------------------------------------------------------


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``, from ``/proc``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            out.append(int(entry.name))
    return out


class JobProcess:
    """One run of the job: a command in a new session, output to a log file.

    :meth:`kill` sends SIGKILL to the whole process group (spark-submit, the
    JVM, the Python driver and the Python workers) and waits until no process
    of the session is left.
    """

    def __init__(self, command: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
        self.command = list(command)
        self.env = dict(env)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> Self:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.started_at = time.monotonic()
        return self

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise ChaosError("job not started")
        return self.proc.pid

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL the process group and wait for every process of it to be gone."""
        pid = self.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(timeout)
        deadline = time.monotonic() + timeout
        while True:
            left = session_members(pid)
            if not left:
                return
            if time.monotonic() > deadline:
                raise ChaosError(f"processes {left} of the killed job (session {pid}) survived")
            for p in left:  # a process that changed its group escaped killpg
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.05)

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def job_command(config_path: Path, master: str) -> list[str]:
    """``spark-submit ... kinesis_spout/spark/job.py --config FILE`` (quiet defaults)."""
    from kinesis_spout.spark.submit import DEFAULT_CONF, find_spark_submit, job_file

    conf = {**DEFAULT_CONF, "spark.ui.enabled": "false"}
    cmd = [find_spark_submit(), "--master", master]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, str(job_file()), "--config", str(config_path)]


# --- the auditor ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SinkRow:
    """One row of the job's Parquet sink."""

    shard_id: str
    sequence: int
    rid: str
    file: str


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead-letter entry."""

    shard_id: str
    sequence: int
    rid: str
    error: str | None
    attempts: int
    file: str
    """Path relative to the dead-letter directory."""
    line: int
    """0-based line in that file."""


def read_sink(directory: str | Path) -> list[SinkRow]:
    """Every row of every ``part-*.parquet`` file (ids parsed from ``data``)."""
    import pyarrow.parquet as pq

    out: list[SinkRow] = []
    base = Path(directory)
    if not base.is_dir():
        return out
    for p in sorted(base.glob("part-*.parquet")):
        table = pq.read_table(p, columns=["shardId", "sequenceNumber", "data"])
        cols = [table.column(c).to_pylist() for c in ("shardId", "sequenceNumber", "data")]
        for shard, seq, data in zip(*cols, strict=True):
            out.append(SinkRow(shard, int(seq), parse_payload(data)[0], p.name))
    return out


def read_dead_letter_dir(directory: str | Path) -> tuple[list[DeadLetter], list[str]]:
    """Every dead-letter entry, and the lines that are not one (e.g. cut by a crash)."""
    base = Path(directory)
    entries: list[DeadLetter] = []
    bad: list[str] = []
    if not base.is_dir():
        return entries, bad
    for p in sorted(base.rglob("*.jsonl")):
        rel = str(p.relative_to(base))
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines()):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                rid = parse_payload(base64.b64decode(obj["data_base64"]))[0]
                entries.append(
                    DeadLetter(
                        obj["shard_id"],
                        int(obj["sequence_number"]),
                        rid,
                        obj.get("error"),
                        int(obj.get("attempts") or 0),
                        rel,
                        i,
                    )
                )
            except (ValueError, KeyError, TypeError):
                bad.append(f"{rel}:{i + 1}: {line[:80]}")
    return entries, bad


@dataclass(frozen=True, slots=True)
class Tally:
    """The auditor's counts (see :func:`tally`)."""

    expected: int
    processed_rows: int
    processed_distinct: int
    lost: int
    lost_sample: tuple[str, ...]
    duplicates: int
    unknown_ids: int
    poison: int
    dead_lettered: int
    """Distinct poison ids found in the dead-letter directory."""
    dead_letter_entries: int
    dead_letter_duplicates: int
    """Dead-letter entries beyond the first of each id."""
    poison_in_output: int
    unexpected_dead_letters: int
    """Distinct good (non-poison) ids found in the dead-letter directory."""
    bad_dead_letter_entries: int
    """Poison entries whose error does not name the id or whose attempts are not
    ``retry_limit + 1``."""


def tally(
    expected: Sequence[str],
    poison: Iterable[str],
    processed: Iterable[str],
    dead: Iterable[tuple[str, str | None, int]],
    retry_limit: int,
) -> Tally:
    """Count what a run did with ``expected`` ids.

    ``processed``: the id of every sink row (repeats are duplicates);
    ``dead``: ``(id, error, attempts)`` per dead-letter entry.
    """
    want = set(expected)
    poison_set = set(poison)
    rows = Counter(processed)
    dead_list = list(dead)
    dead_ids = Counter(rid for rid, _, _ in dead_list)
    accounted = set(rows) | set(dead_ids)
    lost = sorted(want - accounted)
    bad_entries = sum(
        1
        for rid, error, attempts in dead_list
        if rid in poison_set and (not error or rid not in error or attempts != retry_limit + 1)
    )
    return Tally(
        expected=len(want),
        processed_rows=sum(rows.values()),
        processed_distinct=len(rows),
        lost=len(lost),
        lost_sample=tuple(lost[:10]),
        duplicates=sum(rows.values()) - len(rows),
        unknown_ids=len(accounted - want),
        poison=len(poison_set),
        dead_lettered=len(set(dead_ids) & poison_set),
        dead_letter_entries=len(dead_list),
        dead_letter_duplicates=len(dead_list) - len(dead_ids),
        poison_in_output=len(set(rows) & poison_set),
        unexpected_dead_letters=len(set(dead_ids) - poison_set),
        bad_dead_letter_entries=bad_entries,
    )


@dataclass(frozen=True, slots=True)
class KillSnapshot:
    """What was durable when a kill's process group was dead."""

    index: int
    at: float
    """Seconds since the chaos run started."""
    rows: int
    """Sink rows at that moment."""
    sink_files: frozenset[str]
    dead_letter_lines: Mapping[str, int]
    """Complete lines per dead-letter file (relative path)."""
    checkpoints: Mapping[str, int]
    """Stored sequence number per shard (shards with none are absent)."""


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """Replay windows of the kills and the duplicates they do not explain."""

    windows: tuple[int, ...]
    """Per kill: sink records (distinct) after the stored checkpoint of their shard."""
    shard_max: tuple[int, ...]
    """Per kill: the largest window of one shard."""
    unexplained_duplicates: int
    """Sink repeats of a record beyond the number of windows it was in."""
    dead_letter_windows: tuple[int, ...]
    unexplained_dead_letter_duplicates: int

    @property
    def total(self) -> int:
        return sum(self.windows)

    @property
    def max_per_shard(self) -> int:
        """The largest window of one shard at one kill."""
        return max(self.shard_max, default=0)


def replay_windows(
    snapshots: Sequence[KillSnapshot],
    rows: Sequence[SinkRow],
    dead: Sequence[DeadLetter],
) -> ReplayReport:
    """Which duplicates the kills explain.

    A restart resumes each shard after its stored checkpoint, so the records
    after it that were already in the sink (or dead-lettered) at a kill are
    written again: that is the kill's window. A record may be in the sink (or
    the dead-letter directory) at most once plus the number of windows it was in.
    """
    by_file: dict[str, list[SinkRow]] = defaultdict(list)
    for r in rows:
        by_file[r.file].append(r)
    in_windows: Counter[tuple[str, int]] = Counter()
    dl_in_windows: Counter[tuple[str, int]] = Counter()
    windows: list[int] = []
    shard_max: list[int] = []
    dl_windows: list[int] = []
    for snap in snapshots:
        keys: set[tuple[str, int]] = set()
        for name in snap.sink_files:
            for r in by_file.get(name, ()):
                if r.sequence > snap.checkpoints.get(r.shard_id, -1):
                    keys.add((r.shard_id, r.sequence))
        per_shard = Counter(shard for shard, _ in keys)
        shard_max.append(max(per_shard.values(), default=0))
        windows.append(len(keys))
        in_windows.update(keys)
        dl_keys = {
            (d.shard_id, d.sequence)
            for d in dead
            if d.line < snap.dead_letter_lines.get(d.file, 0)
            and d.sequence > snap.checkpoints.get(d.shard_id, -1)
        }
        dl_windows.append(len(dl_keys))
        dl_in_windows.update(dl_keys)
    seen = Counter((r.shard_id, r.sequence) for r in rows)
    unexplained = sum(max(0, n - 1 - in_windows[k]) for k, n in seen.items())
    dl_seen = Counter((d.shard_id, d.sequence) for d in dead)
    dl_unexplained = sum(max(0, n - 1 - dl_in_windows[k]) for k, n in dl_seen.items())
    return ReplayReport(
        tuple(windows), tuple(shard_max), unexplained, tuple(dl_windows), dl_unexplained
    )


# --- the run --------------------------------------------------------------------------------


@dataclass(slots=True)
class ChaosResult:
    """Figures of a chaos run (:attr:`figures` is what ``--json`` prints)."""

    figures: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    """Broken guarantees: loss, duplicates unexplained or beyond
    ``kills x max_in_flight x shards``, poison mishandled, checkpoints going
    back, or a run that did not go as planned."""
    missed: list[str] = field(default_factory=list)
    """The issue's criterion beyond the guarantee that the run did not meet: each
    poison record dead-lettered exactly once (a replay may dead-letter it again)."""

    @property
    def guarantees_held(self) -> bool:
        return not self.problems

    @property
    def ok(self) -> bool:
        return not self.problems and not self.missed


class _ZooKeeperRestart:
    """Stops ZooKeeper, waits, starts it again on the same port and data, in a thread
    (the job keeps running and kills keep coming meanwhile)."""

    def __init__(self, zk: Any, down_seconds: float, origin: float) -> None:
        self.zk = zk
        self.down_seconds = down_seconds
        self.origin = origin
        self.stopped_at = 0.0
        self.unreachable = 0.0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="chaos-zk-restart", daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float = 120.0) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise ChaosError(f"ZooKeeper did not come back within {timeout:.0f}s")
        if self.error is not None:
            raise ChaosError(f"ZooKeeper did not restart: {self.error}") from self.error

    def _run(self) -> None:
        t = time.monotonic()
        self.stopped_at = round(t - self.origin, 1)
        try:
            self.zk.stop()
            time.sleep(self.down_seconds)
            self.zk.start()
        except BaseException as exc:  # reported by join()
            self.error = exc
        self.unreachable = round(time.monotonic() - t, 1)


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
        self.zk_restarts: list[_ZooKeeperRestart] = []
        self.drain_reruns = 0
        """Runs started after a clean exit that left a checkpoint behind (ZooKeeper was down)."""
        self.last_start = origin
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
            code = self.job.poll()
            if code is not None:
                if self._exited(code):
                    break
                continue
            wrote = bool(self.progress.files - self._files_at_start)
            if self.kills_due and rows >= self.kills_due[0][0] and wrote:
                self._kill(self.kills_due.pop(0)[1])
            elif self.zk_due and rows >= self.zk_due[0] and wrote and not self._zk_down:
                self.zk_due.pop(0)
                restart = _ZooKeeperRestart(self.zk, self.plan.zk_down_seconds, self.origin)
                self.zk_restarts.append(restart.start())
                self.say(f"ZooKeeper stopped at {rows} sink rows")
        for restart in self.zk_restarts:
            restart.join()

    @property
    def _zk_down(self) -> bool:
        return any(r.running for r in self.zk_restarts)

    def _launch(self) -> JobProcess:
        self.runs += 1
        job = JobProcess(self.command, self.env, self.work / f"job-{self.runs}.log").start()
        self.stack.callback(_kill_quietly, job)
        self.last_start = time.monotonic()
        self._files_at_start = self.progress.files
        return job

    def _exited(self, code: int) -> bool:
        """The run ended on its own: True when the chaos run is over."""
        if code == 0:
            for restart in self.zk_restarts:
                restart.join()
            stored = {s: v.sequence for s, v in self.watcher.read_now().items()}
            if stored == self.last_seq or self.drain_reruns >= 2:
                return True
            # It stopped idle while ZooKeeper was away: its last checkpoint was not written.
            self.drain_reruns += 1
            self.say(f"run {self.runs} stopped with checkpoints behind; starting it again")
            self.job = self._launch()
            return False
        note = f"run {self.runs} exited with {code}: {_last_error(self.job)}"
        self.failures.append(note)
        self.say(f"job {note}; restarting")
        if code == 2 or len(self.failures) > self.plan.max_job_failures:
            raise ChaosError(f"the job keeps failing; log {self.job.log_path}:\n{self.job.tail()}")
        self.job = self._launch()
        return False

    def _kill(self, delay: float) -> None:
        time.sleep(delay)
        self.job.kill()
        time.sleep(0.2)  # let ZooKeeper apply a write that was on the wire
        snap = KillSnapshot(
            index=len(self.kills) + 1,
            at=round(time.monotonic() - self.origin, 1),
            rows=self.progress.refresh(),
            sink_files=self.progress.files,
            dead_letter_lines=dead_letter_lines(self.work / "dead-letter"),
            checkpoints={
                s: v.sequence
                for s, v in self.watcher.read_now().items()  # waits while ZooKeeper is down
                if v.sequence is not None
            },
        )
        self.kills.append(snap)
        self.say(
            f"kill {snap.index}: SIGKILL to run {self.runs} at {snap.at:.1f}s, "
            f"{snap.rows} sink rows; restarting"
        )
        self.job = self._launch()


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
    from kinesis_spout.spark.submit import job_environment
    from kinesis_spout.testing.faultproxy import FaultProxy
    from kinesis_spout.testing.servers import MotoServer, ZooKeeperServer
    from kinesis_spout.testing.streams import create_stream, emulator_client, put_records

    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")):
        os.environ.setdefault(name, value)
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    phases: dict[str, float] = {}
    stream = f"chaos-{plan.seed}"

    def lap(name: str, since: float) -> float:
        now = time.monotonic()
        phases[name] = round(now - since, 1)
        return now

    with contextlib.ExitStack() as stack:
        moto = stack.enter_context(MotoServer(workdir=work / "moto"))
        zk = stack.enter_context(ZooKeeperServer(workdir=work / "zookeeper"))
        proxy = stack.enter_context(FaultProxy(moto.endpoint_url, seed=plan.seed))
        t = lap("setup", started)
        say(f"moto {moto.endpoint_url}, ZooKeeper {zk.hosts}, fault proxy {proxy.endpoint_url}")

        records = make_records(plan)
        client = emulator_client(moto.endpoint_url)
        create_stream(client, stream, plan.shards)
        put = put_records(client, stream, records.items(plan.record_bytes))
        last_seq: dict[str, int] = {}
        for shard, seq in put:
            last_seq[shard] = max(last_seq.get(shard, -1), int(seq))
        t = lap("produce", t)
        say(
            f"put {plan.records} records ({len(records.poison)} poison) into {plan.shards} "
            f"shards of {stream} in {phases['produce']:.1f}s"
        )

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
        loop = _ChaosLoop(
            plan,
            make_schedule(plan, plan.records - len(records.poison)),
            command=job_command(config_path, plan.master),
            env=job_environment(master=plan.master),
            work=work,
            zk=zk,
            watcher=watcher,
            last_seq=last_seq,
            stack=stack,
            origin=started,
            say=say,
        )
        loop.run(started + plan.timeout)
        t_end = time.monotonic()
        phases["run"] = round(loop.last_start - t, 1)
        phases["drain"] = round(t_end - loop.last_start, 1)
        say(f"run {loop.runs} drained and stopped; auditing")

        final = watcher.read_now()
        watcher.stop()
        monotonic = check_monotonic(watcher.observations(), watcher.corrupt)
        faults = proxy.injected
        requests = sum(proxy.requests.values())
        rows_all = read_sink(work / "sink")
        dead, bad_lines = read_dead_letter_dir(work / "dead-letter")
        counts = tally(
            records.ids,
            records.poison,
            (r.rid for r in rows_all),
            ((d.rid, d.error, d.attempts) for d in dead),
            plan.retry_limit,
        )
        replay = replay_windows(loop.kills, rows_all, dead)
        final_ok = {s: v.sequence for s, v in final.items()} == last_seq
        lap("audit", t_end)
    phases["total"] = round(time.monotonic() - started, 1)

    figures: dict[str, Any] = {
        "records": plan.records,
        "shards": plan.shards,
        "seed": plan.seed,
        "lost": counts.lost,
        "duplicates": counts.duplicates,
        "kills": len(loop.kills),
        "max_in_flight": plan.max_in_flight,
        "duplicate_bound": len(loop.kills) * plan.max_in_flight * plan.shards,
        "replay_window": replay.total,
        "replay_window_max_per_shard": replay.max_per_shard,
        "unexplained_duplicates": replay.unexplained_duplicates,
        "poison": counts.poison,
        "dead_lettered": counts.dead_lettered,
        "dead_letter_entries": counts.dead_letter_entries,
        "dead_letter_duplicates": counts.dead_letter_duplicates,
        "unexplained_dead_letter_duplicates": replay.unexplained_dead_letter_duplicates,
        "bad_dead_letter_entries": counts.bad_dead_letter_entries + len(bad_lines),
        "poison_in_output": counts.poison_in_output,
        "unexpected_dead_letters": counts.unexpected_dead_letters,
        "unknown_ids": counts.unknown_ids,
        "checkpoints_monotonic": monotonic.monotonic,
        "checkpoint_values_seen": monotonic.values_seen,
        "final_checkpoints_at_end": final_ok,
        "zk_restarts": len(loop.zk_restarts),
        "zk_unreachable_seconds": [r.unreachable for r in loop.zk_restarts],
        "kinesis_calls": requests,
        "faults": {
            "throttle": faults.throttle,
            "error": faults.error,
            "drop": faults.drop_before + faults.drop_after,
            "expire": faults.expire,
            "rate": round(faults.total / requests, 3) if requests else 0.0,
        },
        "job_runs": loop.runs,
        "job_failures": len(loop.failures),
        "job_failure_messages": loop.failures,
        "drain_reruns": loop.drain_reruns,
        "retry_limit": plan.retry_limit,
        "batch_size": plan.batch_size,
        "records_per_call": plan.records_per_call,
        "checkpoint_interval": plan.checkpoint_interval,
        "kill_log": [
            {"at": s.at, "rows": s.rows, "window": w, "largest_shard_window": m}
            for s, w, m in zip(loop.kills, replay.windows, replay.shard_max, strict=True)
        ],
        "seconds": phases["total"],
        "phases": phases,
    }
    result = ChaosResult(
        figures,
        _problems(plan, figures, counts, monotonic, bad_lines, last_seq, final),
        _missed(figures),
    )
    figures["guarantees_held"] = result.guarantees_held
    figures["ok"] = result.ok
    return result


def _missed(f: Mapping[str, Any]) -> list[str]:
    """The issue's criteria beyond the guarantees (see :attr:`ChaosResult.missed`)."""
    out = []
    if f["dead_letter_duplicates"]:
        out.append(
            f"{f['dead_letter_duplicates']} poison records dead-lettered again after a kill "
            "(each should be dead-lettered once)"
        )
    return out


def _problems(
    plan: ChaosPlan,
    f: Mapping[str, Any],
    counts: Tally,
    monotonic: MonotonicReport,
    bad_lines: Sequence[str],
    last_seq: Mapping[str, int],
    final: Mapping[str, CheckpointSeen],
) -> list[str]:
    """Every check of the audit that failed, as a sentence."""
    out: list[str] = []
    if counts.lost:
        out.append(f"{counts.lost} records lost, e.g. {', '.join(counts.lost_sample)}")
    if counts.unknown_ids:
        out.append(f"{counts.unknown_ids} ids in the output that were never put")
    if f["unexplained_duplicates"]:
        out.append(f"{f['unexplained_duplicates']} duplicates outside every kill's replay window")
    if f["duplicates"] > f["duplicate_bound"]:
        out.append(
            f"{f['duplicates']} duplicates > kills x max_in_flight x shards "
            f"= {f['duplicate_bound']}"
        )
    if f["replay_window_max_per_shard"] > plan.max_in_flight:
        out.append(
            f"a kill replayed {f['replay_window_max_per_shard']} records of one shard "
            f"> max_in_flight {plan.max_in_flight}"
        )
    if counts.dead_lettered != counts.poison:
        out.append(f"{counts.dead_lettered} of {counts.poison} poison records dead-lettered")
    if counts.poison_in_output:
        out.append(f"{counts.poison_in_output} poison records in the sink")
    if counts.unexpected_dead_letters:
        out.append(f"{counts.unexpected_dead_letters} good records dead-lettered")
    if f["bad_dead_letter_entries"]:
        out.append(
            f"{f['bad_dead_letter_entries']} dead-letter entries without the record's error "
            f"or with attempts != {plan.retry_limit + 1}: {list(bad_lines)[:3]}"
        )
    if f["unexplained_dead_letter_duplicates"]:
        out.append(
            f"{f['unexplained_dead_letter_duplicates']} dead-letter repeats outside every "
            "kill's replay window"
        )
    if not monotonic.monotonic:
        out.append("checkpoint went backwards: " + "; ".join(monotonic.violations[:5]))
    if not f["final_checkpoints_at_end"]:
        got = {s: v.sequence for s, v in final.items()}
        out.append(f"final checkpoints {got} != last sequence numbers {dict(last_seq)}")
    if f["kills"] != plan.kills:
        out.append(f"{f['kills']} kills done, {plan.kills} planned")
    if f["zk_restarts"] != plan.zk_restarts:
        out.append(f"{f['zk_restarts']} ZooKeeper restarts done, {plan.zk_restarts} planned")
    return out


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


def figures_json(result: ChaosResult) -> str:
    """The figures as one JSON line."""
    return json.dumps(result.figures, separators=(", ", ": "))


__all__ = [
    "ChaosError",
    "ChaosPlan",
    "ChaosRecords",
    "ChaosResult",
    "CheckpointSeen",
    "CheckpointWatcher",
    "DeadLetter",
    "JobProcess",
    "KillSnapshot",
    "MonotonicReport",
    "ReplayReport",
    "Schedule",
    "SinkProgress",
    "SinkRow",
    "Tally",
    "check_monotonic",
    "dead_letter_lines",
    "figures_json",
    "job_command",
    "job_config",
    "make_records",
    "make_schedule",
    "read_dead_letter_dir",
    "read_sink",
    "replay_windows",
    "run_chaos",
    "session_members",
    "tally",
]
