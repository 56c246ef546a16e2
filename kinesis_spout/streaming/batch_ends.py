"""Batch-end records of the streaming source: where each (batch, shard) read stopped.

``latestOffset`` never reads records. A batch's offset names, per shard, where
its read starts and how many records it may take; the executor task reading
the shard stops at that limit, at the shard's tip or at its end, and **before
it returns** records where it stopped under ``(batch id, shard)`` in the
checkpoint store. The first writer wins: a retried or speculative task finds
the record and reads exactly the same range, so a batch has the same records
on every attempt. The next batch starts from the recorded ends, and the
commit of a batch writes them as the shards' checkpoints; records of batches
before the committed one are then removed, and a leftover attempt of a removed
batch cannot record it again (the store keeps a *floor*: the lowest batch kept).

Batch ids restart at 1 in a new Spark checkpoint location, so records are
kept per *run*: the id the initial offset drew, carried by every offset of
that checkpoint location. Each record also says what it was planned from
(:class:`~.batch_offset.PlannedFrom`: the run, the shard's start position and quota); a
record that does not match the batch's plan is refused, never used.

Layout (next to the checkpoints of the job, never mistaken for one)::

    file://DIR   DIR/<job>/<stream>.batches/run-<run>/<batch, 12 digits>/<shard>.json
    zk://h/root  /root/<job>/<stream>/@batches/run-<run>/<batch, 12 digits>/<shard>

plus a ``floor`` file or node next to the batches. Offsets of earlier releases
have no run (``""``): their records are directly under ``.batches``/``@batches``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kinesis_spout.durable import fsync_dir, replace_synced, write_synced
from kinesis_spout.streaming.batch_offset import PlannedFrom
from kinesis_spout.streaming.errors import OffsetError
from kinesis_spout.streaming.offsets import ShardPosition


class BatchEndError(OffsetError):
    """A batch-end record is missing, corrupt, of another plan, or of a batch already
    removed (names the batch, the shard, the place)."""


@dataclass(frozen=True, slots=True)
class BatchEnd:
    """Where one batch's read of one shard stopped."""

    position: ShardPosition | None
    """The last record included (``count``: how many this batch read), or ``None``:
    nothing read and the shard did not end (the next batch starts where this one did)."""
    caught_up: bool = False
    """The read reached the shard's tip (or the availableNow cutoff)."""
    throttled: bool = False
    """Kinesis kept refusing the read: the next batch waits a little for this shard."""
    at: float = 0.0
    """Wall time of the record (epoch seconds)."""
    children: tuple[str, ...] = ()
    """The shard ended: its child shards (lineage)."""
    reader: str = ""
    """``host:pid`` of the executor process that read it."""
    planned: PlannedFrom | None = None
    """What the read was planned from; ``None`` only in records of earlier releases."""

    @property
    def count(self) -> int:
        return self.position.count if self.position is not None else 0

    def to_json(self) -> dict[str, Any]:
        out = {
            "position": None if self.position is None else self.position.to_json(),
            "caught_up": self.caught_up,
            "throttled": self.throttled,
            "at": self.at,
            "children": list(self.children),
            "reader": self.reader,
        }
        if self.planned is not None:
            out["planned"] = self.planned.to_json()
        return out

    @classmethod
    def from_json(cls, doc: Any, where: str) -> BatchEnd:
        try:
            if not isinstance(doc, dict) or set(doc) - {"planned"} != {
                "position", "caught_up", "throttled", "at", "children", "reader",
            }:  # fmt: skip
                raise ValueError("not a batch-end record")
            planned = doc.get("planned")
            plan = None if planned is None else PlannedFrom.from_json(planned, where)
            pos = doc["position"]
            position = None if pos is None else ShardPosition.from_json(pos, where)
            flags = (doc["caught_up"], doc["throttled"])
            if not all(isinstance(f, bool) for f in flags):
                raise ValueError("caught_up and throttled must be booleans")
            children = doc["children"]
            if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
                raise ValueError("children must be a list of shard ids")
            reader = doc["reader"]
            if not isinstance(reader, str):
                raise ValueError("reader must be a string")
            return cls(
                position, flags[0], flags[1], float(doc["at"]), tuple(children), reader, plan
            )
        except (ValueError, TypeError, OffsetError) as exc:
            raise BatchEndError(
                f"corrupt batch-end record at {where}: {exc}: {doc!r:.300}"
            ) from None


def check_planned(end: BatchEnd, expected: PlannedFrom, where: str) -> None:
    """Refuse (naming both) a record made for another plan than ``expected``. A record
    of an earlier release (no plan in it) is taken only under offsets of that release."""
    if end.planned == expected or (end.planned is None and expected.run == ""):
        return
    theirs = (
        end.planned.describe()
        if end.planned is not None
        else "an unknown plan (a record of an earlier release, with no run)"
    )
    raise BatchEndError(
        f"the batch-end record at {where} was planned from {theirs}, but this batch is "
        f"planned from {expected.describe()}: the record belongs to another run of the query "
        "or to another query with the same jobName and checkpointStore; refusing to use it "
        "(give each query its own jobName)"
    )


def removed_error(where: str, batch: int, floor: int) -> BatchEndError:
    return BatchEndError(
        f"batch {batch} was committed and its batch-end records removed (the store keeps "
        f"batches >= {floor}): this task attempt is a leftover and records nothing at {where}"
    )


class BatchEndStore(Protocol):
    def get(self, run: str, batch: int, shard: str) -> BatchEnd | None: ...

    def record(self, run: str, batch: int, shard: str, end: BatchEnd) -> BatchEnd:
        """Record ``end`` unless one is recorded already; the recorded one (first wins).
        :class:`BatchEndError` if ``batch`` is below the run's floor (already removed)."""
        ...

    def floor(self, run: str) -> int:
        """The lowest batch of ``run`` whose records are kept (0: none removed yet)."""
        ...

    def forget_before(self, run: str, batch: int) -> int:
        """Raise ``run``'s floor to ``batch``, then remove the records of batches before
        it; how many batches went."""
        ...

    def where(self, run: str, batch: int, shard: str) -> str: ...

    def close(self) -> None: ...


def _encode(end: BatchEnd) -> bytes:
    return json.dumps(end.to_json(), separators=(",", ":"), sort_keys=True).encode("utf-8")


def _decode(data: bytes, where: str) -> BatchEnd:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BatchEndError(f"corrupt batch-end record at {where}: not JSON ({exc})") from None
    return BatchEnd.from_json(doc, where)


def _decode_floor(data: bytes, where: str) -> int:
    text = data.decode("utf-8", "replace").strip()
    if not text.isdigit():
        raise BatchEndError(f"corrupt batch-end floor at {where}: {text!r:.100}")
    return int(text)


def _run_dir(run: str) -> str:
    return f"run-{run}" if run else ""


class FileBatchEnds:
    """``file://DIR``: one file per record, created with ``link`` (first writer wins)."""

    def __init__(self, directory: str, job: str, stream: str) -> None:
        self.root = Path(directory) / job / f"{stream}.batches"

    def _dir(self, run: str) -> Path:
        return self.root / _run_dir(run) if run else self.root

    def _path(self, run: str, batch: int, shard: str) -> Path:
        return self._dir(run) / f"{batch:012d}" / f"{shard}.json"

    def where(self, run: str, batch: int, shard: str) -> str:
        return str(self._path(run, batch, shard))

    def get(self, run: str, batch: int, shard: str) -> BatchEnd | None:
        p = self._path(run, batch, shard)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            return None
        return _decode(data, str(p))

    def record(self, run: str, batch: int, shard: str, end: BatchEnd) -> BatchEnd:
        p = self._path(run, batch, shard)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.parent / f".{shard}.{uuid.uuid4().hex}.tmp"
        write_synced(tmp, _encode(end))
        try:
            os.link(tmp, p)  # atomic, and fails if a record is there: the first one wins
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(p.parent)
        floor = self.floor(run)  # after the link: a cleanup that raced us is seen here
        if batch < floor:
            shutil.rmtree(p.parent, ignore_errors=True)
            raise removed_error(str(p), batch, floor)
        got = self.get(run, batch, shard)
        assert got is not None
        return got

    def floor(self, run: str) -> int:
        p = self._dir(run) / "floor"
        try:
            return _decode_floor(p.read_bytes(), str(p))
        except FileNotFoundError:
            return 0

    def forget_before(self, run: str, batch: int) -> int:
        d = self._dir(run)
        if not d.is_dir():
            return 0
        if batch > self.floor(run):  # the floor first: a leftover attempt then sees it
            replace_synced(d / "floor", str(batch).encode())
        gone = 0
        for b in d.iterdir():
            if b.name.isdigit() and int(b.name) < batch:
                shutil.rmtree(b, ignore_errors=True)
                gone += 1
        return gone

    def close(self) -> None:
        return None


class ZkBatchEnds:
    """``zk://``: one node per record, created only if absent (first writer wins)."""

    def __init__(self, url: str, job: str, stream: str, auth: str | None = None) -> None:
        from kinesis_spout.checkpoint.zk_connect import connect

        self.conn = connect(url, job, auth=auth, session_timeout=10.0, connect_timeout=15.0)
        self.base = f"{self.conn.url.root}/{job}/{stream}/@batches"

    def _dir(self, run: str) -> str:
        return f"{self.base}/{_run_dir(run)}" if run else self.base

    def where(self, run: str, batch: int, shard: str) -> str:
        return f"zk://{self.conn.url.hosts}{self._dir(run)}/{batch:012d}/{shard}"

    def get(self, run: str, batch: int, shard: str) -> BatchEnd | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.conn.client.get(f"{self._dir(run)}/{batch:012d}/{shard}")
        except NoNodeError:
            return None
        return _decode(data, self.where(run, batch, shard))

    def record(self, run: str, batch: int, shard: str, end: BatchEnd) -> BatchEnd:
        from kazoo.exceptions import NodeExistsError, NoNodeError

        path = f"{self._dir(run)}/{batch:012d}/{shard}"
        with contextlib.suppress(NodeExistsError):
            self.conn.client.create(path, _encode(end), acl=self.conn.acl, makepath=True)
        floor = self.floor(run)  # after the create: a cleanup that raced us is seen here
        if batch < floor:
            with contextlib.suppress(NoNodeError):
                self.conn.client.delete(f"{self._dir(run)}/{batch:012d}", recursive=True)
            raise removed_error(self.where(run, batch, shard), batch, floor)
        got = self.get(run, batch, shard)
        assert got is not None
        return got

    def floor(self, run: str) -> int:
        from kazoo.exceptions import NoNodeError

        path = f"{self._dir(run)}/floor"
        try:
            data, _ = self.conn.client.get(path)
        except NoNodeError:
            return 0
        return _decode_floor(data, f"zk://{self.conn.url.hosts}{path}")

    def forget_before(self, run: str, batch: int) -> int:
        from kazoo.exceptions import NodeExistsError, NoNodeError

        client, d = self.conn.client, self._dir(run)
        if client.exists(d) is None:
            return 0
        if batch > self.floor(run):  # the floor first: a leftover attempt then sees it
            try:
                client.create(f"{d}/floor", str(batch).encode(), acl=self.conn.acl)
            except NodeExistsError:
                client.set(f"{d}/floor", str(batch).encode())
        try:
            names = client.get_children(d)  # listed after the floor is up
        except NoNodeError:
            return 0
        gone = 0
        for name in names:
            if name.isdigit() and int(name) < batch:
                with contextlib.suppress(NoNodeError):
                    client.delete(f"{d}/{name}", recursive=True)
                gone += 1
        return gone

    def close(self) -> None:
        client = self.conn.client
        client.stop()
        client.close()


def open_batch_ends(url: str, job: str, stream: str, zk_auth: str | None = None) -> BatchEndStore:
    """The batch-end store of the checkpoint store ``url`` (``file://`` or ``zk://``)."""
    if url.startswith("file://"):
        return FileBatchEnds(url[len("file://") :], job, stream)
    if url.startswith("zk://"):
        return ZkBatchEnds(url, job, stream, zk_auth)
    from kinesis_spout.errors import ConfigError

    raise ConfigError("checkpointStore", url, "file://DIR or zk://host:port[,host:port]/root")
