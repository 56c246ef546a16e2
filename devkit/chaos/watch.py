"""Watching a chaos run: rows in the Parquet sink so far, dead-letter lines, and every
checkpoint value seen in ZooKeeper (with the monotonicity check)."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from devkit.chaos.plan import ChaosError

_kazoo_log = logging.getLogger("devkit.chaos.kazoo")
"""The watcher's kazoo client logs here (ERROR and above by default: ZooKeeper
going away is part of the plan, not news)."""
if _kazoo_log.level == logging.NOTSET:
    _kazoo_log.setLevel(logging.ERROR)


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

    @property
    def started_at(self) -> float:
        """``time.monotonic()`` when the watcher started: ``seen_at`` counts from here."""
        return self._started

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
