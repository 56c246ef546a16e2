"""A worker process for multi-worker runs: one spout, ZooKeeper-coordinated.

``python -m kinesis_spout.coordination.worker --config job.toml --checkpoint-store
zk://... --worker-id w1 --output DIR``: the worker joins each stream's worker group,
takes the shards assigned to it, and appends one line per record to
``<output>/<worker_id>.records`` before it acks the batch, so a line without an ack is
exactly an in-flight duplicate (what the takeover tests count). Several
streams: one spout and one :class:`ShardCoordinator` per stream, each stream's
assignment rotated past the extra shards of the streams before it, so every worker of a
job must list the same streams in the same order. SIGTERM or SIGINT gives the shards up
cleanly. Usage and line format: docs/checkpoints.md ("The worker entry point").
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TextIO

from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore
from kinesis_spout.config import SpoutConfig
from kinesis_spout.config.load import add_config_arguments, config_from_args
from kinesis_spout.coordination.group import StreamCoordinators
from kinesis_spout.errors import ConfigError, KinesisSpoutError
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.metrics import MetricsCollector, NoopMetrics
from kinesis_spout.observability.endpoint import MetricsEndpoint
from kinesis_spout.records import Record
from kinesis_spout.spout import KinesisSpout

log = logging.getLogger(__name__)

#: Longest sleep of the loop when nothing is ready (keeps SIGTERM handling prompt).
_MAX_IDLE_SLEEP = 0.2


def record_line(record: Record, with_stream: bool = False) -> str:
    """The line written for one processed record; ``with_stream`` (a worker of several
    streams) puts the stream first, a worker of one writes the lines it always wrote."""
    payload_id = record.data.split(b"|", 1)[0].decode("utf-8", "replace")
    line = f"{record.shard_id} {record.sequence_number} {record.sub_sequence_number} {payload_id}\n"
    return f"{record.stream_name} {line}" if with_stream else line


def process(
    records: Sequence[Record], out: TextIO, delay_per_record: float, with_stream: bool = False
) -> None:
    """The trivial processing function: log each record, flush, simulate work."""
    out.write("".join(record_line(r, with_stream) for r in records))
    out.flush()
    if delay_per_record > 0:
        time.sleep(delay_per_record * len(records))


def run_worker(
    config: SpoutConfig,
    output_dir: Path,
    *,
    stop: threading.Event,
    process_delay: float = 0.0,
    drain_timeout: float = 10.0,
) -> int:
    """Run until ``stop`` is set, then leave the group cleanly. Returns an exit code.

    With ``metrics_port`` the worker serves its metrics (the spout's and the leases')
    from before it connects to anything (a taken port fails first) until it has left."""
    if not config.checkpoint_store.startswith("zk://"):
        raise ConfigError(
            "checkpoint_store",
            config.checkpoint_store,
            "a zk:// URL: several workers coordinate through ZooKeeper (their shard leases "
            "are ZooKeeper's; a dynamodb:// store holds one reader per job)",
        )
    endpoint = MetricsEndpoint.of(config, "worker")
    metrics = endpoint.start().metrics if endpoint is not None else NoopMetrics()
    try:
        _run(config, output_dir, stop, metrics, process_delay, drain_timeout)
    finally:
        if endpoint is not None:
            endpoint.close()
    return 0


def _run(
    config: SpoutConfig,
    output_dir: Path,
    stop: threading.Event,
    metrics: MetricsCollector,
    process_delay: float,
    drain_timeout: float,
) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    store = ZooKeeperCheckpointStore.from_url(
        config.checkpoint_store,
        config.job_name,
        owner=config.worker_id,
        auth=config.zk_auth,
        session_timeout=config.zk_session_timeout,
    )
    client = make_client(
        config.endpoint_url, config.region, profile=config.profile, role=config.assumed_role
    )
    # Shard leases fence the workers sharing the streams: no job lease.
    reader = KinesisSpout(config, store=store, client=client, metrics=metrics, job_lease=False)
    out_path = output_dir / f"{config.worker_id}.records"
    streams = ", ".join(config.stream_names)
    log.info("worker %s starting on %s: %s", config.worker_id, streams, config.redacted())
    coordinators = StreamCoordinators(reader, [])
    try:
        reader.open()
        coordinators = StreamCoordinators.start(reader, store, client, metrics, drain_timeout)
        group = _Group(reader, coordinators)
        with out_path.open("a", encoding="utf-8") as out:
            group.run(
                out,
                stop,
                process_delay,
                config.batch_size,
                shutdown_timeout=drain_timeout + config.zk_session_timeout,
            )
    finally:
        coordinators.close()
        try:
            reader.close()
        finally:
            store.close()
    log.info("worker %s stopped: %s", config.worker_id, reader.stats())


class _Group:
    """The reader and its streams' coordinators (:mod:`kinesis_spout.coordination.group`),
    stepped together by the worker's loop."""

    def __init__(self, reader: KinesisSpout, coordinators: StreamCoordinators) -> None:
        self.reader = reader
        self.coordinators = coordinators

    def run(
        self,
        out: TextIO,
        stop: threading.Event,
        process_delay: float,
        batch_size: int,
        shutdown_timeout: float,
    ) -> None:
        """Read, process and ack until ``stop``, then leave every group (or time out)."""
        leave_by: float | None = None
        several = self.coordinators.several
        while True:
            if stop.is_set() and leave_by is None:
                self.coordinators.begin_shutdown()
                leave_by = time.monotonic() + shutdown_timeout
            self.coordinators.poll()
            if self.coordinators.done:
                return
            if leave_by is not None and time.monotonic() > leave_by:
                # ZooKeeper unreachable: closing the session removes the leases anyway.
                log.warning("could not leave the worker group cleanly in %.0fs", shutdown_timeout)
                return
            batch = self.read(batch_size)
            if batch:
                process(batch, out, process_delay, several)
                self.reader.ack_many(batch)
                continue
            delay = min(self.reader.poll_delay(), self.coordinators.poll_delay(), _MAX_IDLE_SLEEP)
            stop.wait(max(delay, 0.001))

    def read(self, batch_size: int) -> list[Record]:
        """The next batch (none while reading is paused); streams let go are left."""
        try:
            batch = self.reader.next_batch(batch_size)
        except KinesisSpoutError as exc:
            if not exc.retriable:
                raise
            log.warning("reading paused: %s", exc)
            batch = []
        self.coordinators.leave_gone()
        return batch


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kinesis_spout.coordination.worker",
        description="One ZooKeeper-coordinated worker: reads its share of the shards of "
        "the config's streams and logs each record to <output>/<worker_id>.records.",
    )
    parser.add_argument("--output", required=True, type=Path, help="directory for .records files")
    parser.add_argument(
        "--process-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="simulated processing time per record (default 0)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long in-flight records of a shard being given up may take (default 10)",
    )
    parser.add_argument("--log-level", default="INFO")
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: leaving the worker group", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        config = config_from_args(args)
        return run_worker(
            config,
            args.output,
            stop=stop,
            process_delay=args.process_delay,
            drain_timeout=args.drain_timeout,
        )
    except KinesisSpoutError as exc:
        log.error("%s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
