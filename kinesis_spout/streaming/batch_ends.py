"""Batch-end records of the streaming source: where each (batch, shard) read stopped.

``latestOffset`` never reads records. A batch's offset names, per shard, where
its read starts and how many records it may take; the executor task reading
the shard stops at that limit, at the shard's tip or at its end, and **before
it returns** records where it stopped under ``(batch id, shard)`` in the
checkpoint store. The first writer wins: a retried or speculative task finds
the record and reads exactly the same range, so a batch has the same records
on every attempt. The next batch starts from the recorded ends, and the
commit of a batch writes them as the shards' checkpoints; records of batches
before the committed one are then removed.

Layout (next to the checkpoints of the job, never mistaken for one)::

    file://DIR   DIR/<job>/<stream>.batches/<batch, 12 digits>/<shard>.json
    zk://h/root  /root/<job>/<stream>/@batches/<batch, 12 digits>/<shard>
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kinesis_spout.streaming.errors import OffsetError
from kinesis_spout.streaming.offsets import ShardPosition


class BatchEndError(OffsetError):
    """A batch-end record is missing or corrupt (names the batch, the shard, the place)."""


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

    @property
    def count(self) -> int:
        return self.position.count if self.position is not None else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "position": None if self.position is None else self.position.to_json(),
            "caught_up": self.caught_up,
            "throttled": self.throttled,
            "at": self.at,
            "children": list(self.children),
            "reader": self.reader,
        }

    @classmethod
    def from_json(cls, doc: Any, where: str) -> BatchEnd:
        try:
            if not isinstance(doc, dict) or set(doc) != {
                "position", "caught_up", "throttled", "at", "children", "reader",
            }:  # fmt: skip
                raise ValueError("not a batch-end record")
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
            return cls(position, flags[0], flags[1], float(doc["at"]), tuple(children), reader)
        except (ValueError, TypeError, OffsetError) as exc:
            raise BatchEndError(
                f"corrupt batch-end record at {where}: {exc}: {doc!r:.300}"
            ) from None


class BatchEndStore(Protocol):
    def get(self, batch: int, shard: str) -> BatchEnd | None: ...

    def record(self, batch: int, shard: str, end: BatchEnd) -> BatchEnd:
        """Record ``end`` unless one is recorded already; the recorded one (first wins)."""
        ...

    def forget_before(self, batch: int) -> int:
        """Remove the records of batches before ``batch``; how many batches went."""
        ...

    def where(self, batch: int, shard: str) -> str: ...

    def close(self) -> None: ...


def _encode(end: BatchEnd) -> bytes:
    return json.dumps(end.to_json(), separators=(",", ":"), sort_keys=True).encode("utf-8")


def _decode(data: bytes, where: str) -> BatchEnd:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BatchEndError(f"corrupt batch-end record at {where}: not JSON ({exc})") from None
    return BatchEnd.from_json(doc, where)


class FileBatchEnds:
    """``file://DIR``: one file per record, created with ``link`` (first writer wins)."""

    def __init__(self, directory: str, job: str, stream: str) -> None:
        self.root = Path(directory) / job / f"{stream}.batches"

    def _path(self, batch: int, shard: str) -> Path:
        return self.root / f"{batch:012d}" / f"{shard}.json"

    def where(self, batch: int, shard: str) -> str:
        return str(self._path(batch, shard))

    def get(self, batch: int, shard: str) -> BatchEnd | None:
        p = self._path(batch, shard)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            return None
        return _decode(data, str(p))

    def record(self, batch: int, shard: str, end: BatchEnd) -> BatchEnd:
        p = self._path(batch, shard)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.parent / f".{shard}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(_encode(end))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, p)  # atomic, and fails if a record is there: the first one wins
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        fd = os.open(p.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        got = self.get(batch, shard)
        assert got is not None
        return got

    def forget_before(self, batch: int) -> int:
        gone = 0
        if not self.root.is_dir():
            return 0
        for d in self.root.iterdir():
            if d.name.isdigit() and int(d.name) < batch:
                shutil.rmtree(d, ignore_errors=True)
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

    def where(self, batch: int, shard: str) -> str:
        return f"zk://{self.conn.url.hosts}{self.base}/{batch:012d}/{shard}"

    def get(self, batch: int, shard: str) -> BatchEnd | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.conn.client.get(f"{self.base}/{batch:012d}/{shard}")
        except NoNodeError:
            return None
        return _decode(data, self.where(batch, shard))

    def record(self, batch: int, shard: str, end: BatchEnd) -> BatchEnd:
        from kazoo.exceptions import NodeExistsError

        path = f"{self.base}/{batch:012d}/{shard}"
        with contextlib.suppress(NodeExistsError):
            self.conn.client.create(path, _encode(end), acl=self.conn.acl, makepath=True)
        got = self.get(batch, shard)
        assert got is not None
        return got

    def forget_before(self, batch: int) -> int:
        from kazoo.exceptions import NoNodeError

        client = self.conn.client
        try:
            names = client.get_children(self.base)
        except NoNodeError:
            return 0
        gone = 0
        for name in names:
            if name.isdigit() and int(name) < batch:
                with contextlib.suppress(NoNodeError):
                    client.delete(f"{self.base}/{name}", recursive=True)
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


def now() -> float:
    return time.time()
