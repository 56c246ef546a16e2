"""``kinesis-spout checkpoints``: the stored checkpoints; ``checkpoints reset``: move
them, with the job stopped.

Both cover every stream of the config, or those of ``--stream NAME``. A reset takes
``--shard ID`` or ``--all`` to ``--to-trim-horizon``, ``--to-latest``,
``--to-timestamp T`` or ``--to-sequence S[:SUB]`` (one shard); it is the operator's
override of "checkpoints only move forward" (:mod:`kinesis_spout.checkpoint.resets`).
It takes the job lease for the time of the reset, so it is refused, naming the holder,
while a reader runs (with a ``zk://`` store also while coordination workers of the
stream are alive). What each target means: docs/checkpoints.md ("Resetting a checkpoint").
"""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime

from kinesis_spout.checkpoint.base import CheckpointStore
from kinesis_spout.checkpoint.resets import TRIM_HORIZON_PIN, pinned_start
from kinesis_spout.config import SpoutConfig
from kinesis_spout.config.load import config_from_args
from kinesis_spout.errors import ConfigError, KinesisSpoutError
from kinesis_spout.records import Checkpoint
from kinesis_spout.words import plural, quoted

READER = "kinesis-spout checkpoints reset"
_SEQUENCE = re.compile(r"(\d{1,40})(?::(\d{1,10}))?")


class ResetRefusedError(KinesisSpoutError):
    """A reader of the job runs (the command exits 3, as for a job lease held)."""

    job_running = True


def add_reset_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``checkpoints reset``."""
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--shard", metavar="ID", help="reset this shard's checkpoint")
    which.add_argument("--all", action="store_true", help="reset every shard's checkpoint")
    to = parser.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-trim-horizon", action="store_true", help="the oldest record kept")
    to.add_argument("--to-latest", action="store_true", help="records put after the reset")
    to.add_argument("--to-timestamp", metavar="T", help="records that arrived at T or later")
    to.add_argument(
        "--to-sequence", metavar="S[:SUB]", help="the records after S (one --shard only)"
    )


def target(args: argparse.Namespace, stream: str, shard: str, now: datetime) -> Checkpoint:
    """The checkpoint a reset stores for ``shard`` (:class:`ConfigError` naming a bad value)."""
    if args.to_sequence is not None:
        m = _SEQUENCE.fullmatch(args.to_sequence)
        if m is None:
            raise ConfigError("--to-sequence", args.to_sequence, "a sequence number [:sub]")
        return Checkpoint(stream, shard, m.group(1), int(m.group(2) or 0), owner=READER)
    if args.to_timestamp is not None:
        try:
            at = datetime.fromisoformat(args.to_timestamp.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(
                "--to-timestamp", args.to_timestamp, "an ISO 8601 time such as 2026-01-31T12:00Z"
            ) from None
        start = at if at.tzinfo else at.replace(tzinfo=UTC)
    else:
        start = now if args.to_latest else TRIM_HORIZON_PIN
    return Checkpoint(stream, shard, None, start_at=start, owner=READER)


def describe(cp: Checkpoint | None) -> str:
    """A checkpoint as the commands print it: ``452:0``, ``452:0 (shard end)``,
    ``start at TRIM_HORIZON``, ``start at <time>``, ``no checkpoint``."""
    if cp is None:
        return "no checkpoint"
    if cp.is_pin and cp.start_at is not None:
        return "start at " + pinned_start(cp)
    end = " (shard end)" if cp.shard_end else ""
    return f"{cp.sequence_number}:{cp.sub_sequence_number}{end}"


def _grid(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def cmd_checkpoints(args: argparse.Namespace) -> int:
    """``kinesis-spout checkpoints``: one row per stored checkpoint, each stream's."""
    from kinesis_spout.checkpoint.factory import open_config_store

    cfg = config_from_args(args)
    store = open_config_store(cfg)
    rows: list[tuple[str, ...]] = []
    none: list[str] = []
    try:
        for stream in cfg.stream_names:
            cps = store.load(stream)
            if not cps:
                none.append(stream)
            for shard_id, cp in sorted(cps.items()):
                saved = cp.updated_at.isoformat(timespec="seconds") if cp.updated_at else "-"
                rows.append((stream, shard_id, describe(cp), saved))
    finally:
        store.close()
    if rows:
        print("\n".join(_grid([("STREAM", "SHARD", "CHECKPOINT", "SAVED"), *rows])))
    for stream in none:
        print(f"no checkpoints for job {cfg.job_name!r} on stream {stream!r}")
    print(
        f"{plural(len(rows), 'checkpoint')} of job {cfg.job_name!r}, "
        f"{'stream' if len(cfg.stream_names) == 1 else 'streams'} {quoted(cfg.stream_names)}"
    )
    return 0


@contextlib.contextmanager
def job_stopped(cfg: SpoutConfig, store: CheckpointStore) -> Iterator[None]:
    """Hold the job lease (and, on ZooKeeper, see no live worker) while the body runs;
    :class:`ResetRefusedError` naming who reads otherwise."""
    from kinesis_spout.checkpoint.joblease import JobLeaseHeldError, open_config_job_lease

    lease = open_config_job_lease(cfg, READER)
    try:
        lease.acquire(wait=False)
    except JobLeaseHeldError as exc:
        lease.release()
        said = str(exc).split("; stop it", 1)[0]
        raise ResetRefusedError(f"checkpoints reset refused: {said}; stop it first") from None
    try:
        _check_no_workers(cfg, store)
        yield
    finally:
        lease.release()


def _check_no_workers(cfg: SpoutConfig, store: CheckpointStore) -> None:
    if not cfg.checkpoint_store.startswith("zk://"):
        return  # coordination workers need ZooKeeper (and kazoo, which may not be installed)
    from kinesis_spout.checkpoint.zookeeper import ZooKeeperCheckpointStore

    if not isinstance(store, ZooKeeperCheckpointStore):
        return
    from kinesis_spout.status.sources_leases import zk_workers

    for stream in cfg.stream_names:
        workers = zk_workers(store, stream)
        if workers:
            names = ", ".join(f"{w.worker_id} (host {w.host}, pid {w.pid})" for w in workers)
            raise ResetRefusedError(
                f"checkpoints reset refused: workers of job {cfg.job_name!r} read stream "
                f"{stream!r}: {names}; stop them first"
            )


def _listed_shards(cfg: SpoutConfig) -> list[str]:
    from kinesis_spout.kinesis.api import KinesisApi
    from kinesis_spout.kinesis.client import make_client

    client = make_client(
        cfg.endpoint_url, cfg.region, profile=cfg.profile, role=cfg.assumed_role, one_shot=True
    )
    return [s.shard_id for s in KinesisApi(client, cfg.stream_name).list_shards()]


def shards_to_reset(
    cfg: SpoutConfig, args: argparse.Namespace, stored: dict[str, Checkpoint]
) -> list[str]:
    """``--shard`` (checked against the checkpoints, then the stream), or ``--all``;
    ``cfg`` is one stream's."""
    if args.all:
        if args.to_sequence is not None:
            raise ConfigError("--to-sequence", args.to_sequence, "one --shard, not --all")
        return sorted(set(stored) | set(_listed_shards(cfg)))
    if args.shard in stored:
        return [args.shard]
    listed = _listed_shards(cfg)
    if args.shard not in listed:
        raise ConfigError(
            "--shard", args.shard, f"a shard of stream {cfg.stream_name!r}: {', '.join(listed)}"
        )
    return [args.shard]


def _one_stream_for_a_shard(cfg: SpoutConfig, args: argparse.Namespace) -> None:
    """``--shard ID`` names a shard of one stream: with several, ``--stream`` says which."""
    if args.shard is not None and len(cfg.stream_names) > 1:
        raise ConfigError(
            "--shard",
            args.shard,
            f"a shard of one stream: add --stream NAME (one of {quoted(cfg.stream_names)})",
        )


def cmd_reset(args: argparse.Namespace) -> int:
    """Reset the chosen shards' checkpoints of each stream; print each one's before and
    after."""
    from kinesis_spout.checkpoint.factory import open_config_store

    cfg = config_from_args(args)
    _one_stream_for_a_shard(cfg, args)
    store = open_config_store(cfg)
    rows: list[tuple[str, ...]] = []
    try:
        with job_stopped(cfg, store):
            now = datetime.now(UTC)
            for one in cfg.per_stream():
                stream = one.stream_name
                stored = store.load(stream)
                for shard in shards_to_reset(one, args, stored):
                    new = store.reset(stream, shard, target(args, stream, shard, now))
                    rows.append(
                        (stream, shard, f"{describe(stored.get(shard))} -> {describe(new)}")
                    )
    finally:
        store.close()
    if rows:
        print("\n".join(_grid(rows)))
    print(
        f"reset {plural(len(rows), 'checkpoint')} of job {cfg.job_name!r}, "
        f"{'stream' if len(cfg.stream_names) == 1 else 'streams'} {quoted(cfg.stream_names)}"
    )
    return 0
