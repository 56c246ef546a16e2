"""Helpers of the reader integration tests: fill streams, build spouts, drive them."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kit import spout_config

from kinesis_spout.checkpoint.base import CheckpointStore
from kinesis_spout.config import SpoutConfig
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.records import Record
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.processes import wait_until
from kinesis_spout.testing.servers import KinesisMock
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

CLOCKSHIFT = Path(__file__).with_name("clockshift.js")


class ClockKinesisMock(KinesisMock):
    """kinesis-mock whose clock jumps ``shift_seconds`` ahead on each :meth:`jump`.

    ``clockshift.js`` is preloaded into the Node process; SIGUSR2 moves its
    ``Date.now`` and ``performance.now`` forward.
    """

    def __init__(self, shift_seconds: int = 301) -> None:
        node_options = f"{os.environ.get('NODE_OPTIONS', '')} --require {CLOCKSHIFT}".strip()
        super().__init__(
            extra_env={"NODE_OPTIONS": node_options, "CLOCK_SHIFT_SECONDS": str(shift_seconds)}
        )

    def stop(self, kill: bool = True) -> None:
        # kinesis-mock ignores SIGTERM (ManagedProcess would wait 10 s for it); it
        # holds nothing worth a clean shutdown here.
        super().stop(kill=kill)

    def jumps(self) -> int:
        """The jumps done so far, from the lines ``clockshift.js`` writes to the log."""
        try:
            return self.log_path.read_text(errors="replace").count("clockshift: clock moved")
        except OSError:
            return 0

    def jump(self) -> None:
        """Move the clock, and return once its event loop ran the handler (it logs it)."""
        assert self.proc is not None
        done = self.jumps() + 1
        os.kill(self.proc.pid, signal.SIGUSR2)
        wait_until(
            lambda: self.jumps() >= done,
            30,
            f"kinesis-mock to log clock jump {done}",
            seen=lambda: self.tail_log(5),
        )


PACE: dict[str, Any] = {
    "checkpoint_interval": 0.5,
    "shard_refresh_interval": 1.0,
    "message_timeout": 0.0,
}
"""The reader tests' pace on top of the fast backoffs: checkpoints twice a second,
reshards seen within a second, no message timeout."""


def fill(
    client: Any, stream: str, n: int, *, shards: int = 4, prefix: str = "r", size: int = 100
) -> list[str]:
    """Create ``stream`` with ``shards`` shards and put ``n`` records; their ids in order."""
    create_stream(client, stream, shards)
    return put(client, stream, n, prefix=prefix, size=size)


def put(client: Any, stream: str, n: int, *, prefix: str = "r", size: int = 100) -> list[str]:
    items = make_payloads(n, size, prefix)
    put_records(client, stream, items)
    return [rid(data) for _pk, data in items]


def rid(data: bytes) -> str:
    """The id of a record written by :func:`fill` (``<prefix><index>``)."""
    return data.split(b"|", 1)[0].decode()


def ids(records: Iterable[Record]) -> list[str]:
    return [rid(r.data) for r in records]


def config(endpoint: str | None, stream: str, tmp_path: Path, **kw: Any) -> SpoutConfig:
    """The reader tests' config of ``stream``: checkpoints in memory, at their pace."""
    values: dict[str, Any] = {
        "stream_name": stream,
        "endpoint_url": endpoint,
        "dead_letter": str(tmp_path / "dead"),
        "worker_id": "worker-1",
        **PACE,
    }
    return spout_config(**{**values, **kw})


def spout(
    endpoint: str,
    stream: str,
    tmp_path: Path,
    store: CheckpointStore | None = None,
    *,
    metrics: MetricsCollector | None = None,
    client: Any | None = None,
    **kw: Any,
) -> KinesisSpout:
    """An opened spout on ``stream`` (its own client unless one is given)."""
    sp = KinesisSpout(
        config(endpoint, stream, tmp_path, **kw),
        store=store,
        metrics=metrics,
        client=client if client is not None else make_client(endpoint),
    )
    sp.open()
    return sp


def drive(
    sp: KinesisSpout,
    handle: Callable[[list[Record]], None],
    *,
    stop: Callable[[], bool] | None = None,
    batch: int = 2000,
    timeout: float = 60.0,
) -> None:
    """Feed batches to ``handle`` until ``stop()`` (default: the spout is idle),
    checked after every batch.

    Sleeps on ``poll_delay`` (at most 50 ms) when nothing is ready, and fails
    with the spout's state after ``timeout`` seconds.
    """
    stop = stop or (lambda: sp.is_idle)
    deadline = time.monotonic() + timeout
    while True:
        got = sp.next_batch(batch)
        if got:
            handle(got)
        if stop():
            return
        if got:
            continue
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout}s: {sp.stats()} states={sp.shard_states()}"
            )
        time.sleep(min(sp.poll_delay(), 0.05))


def read_all(sp: KinesisSpout, **kw: Any) -> list[Record]:
    """Read and ack everything until the spout is idle."""
    out: list[Record] = []

    def handle(batch: list[Record]) -> None:
        out.extend(batch)
        sp.ack_many(batch)

    drive(sp, handle, **kw)
    return out
