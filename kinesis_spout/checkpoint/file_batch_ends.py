"""The batch-end records of a ``file://DIR`` checkpoint store (:mod:`.batch_ends`).

Layout, next to the job's checkpoint files (:mod:`.file`)::

    DIR/<job>/<stream>.batches/run-<run>/<batch, 12 digits>/<shard>.json
    DIR/<job>/<stream>.batches/run-<run>/floor

A record is written to a temporary file, synced, then ``link``-ed to its name:
atomic, and refused when a record is there, so the first writer wins.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from kinesis_spout.checkpoint.batch_ends import (
    BatchEnd,
    decode_end,
    decode_floor,
    encode_end,
    removed_error,
    run_dir,
)
from kinesis_spout.durable import fsync_dir, replace_synced, write_synced


class FileBatchEnds:
    """``file://DIR``: one file per record, created with ``link`` (first writer wins)."""

    def __init__(self, directory: str, job: str, stream: str) -> None:
        self.root = Path(directory) / job / f"{stream}.batches"

    def _dir(self, run: str) -> Path:
        return self.root / run_dir(run) if run else self.root

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
        return decode_end(data, str(p))

    def record(self, run: str, batch: int, shard: str, end: BatchEnd) -> BatchEnd:
        p = self._path(run, batch, shard)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.parent / f".{shard}.{uuid.uuid4().hex}.tmp"
        write_synced(tmp, encode_end(end))
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
            return decode_floor(p.read_bytes(), str(p))
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
