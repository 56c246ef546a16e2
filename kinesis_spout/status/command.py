"""``kinesis-spout status``: per shard of the stream, its checkpoint, state, owner,
lag and dead letters, and the job lease; a table, or one JSON document with ``--json``.
A job of several streams (``streams``): one table per stream, and the document's
``streams`` list; ``--stream NAME`` shows that one.

Read only: it creates no file, directory, ZooKeeper node or DynamoDB table or item, takes
no lease and
writes no checkpoint. Exit status: 0 when the report was printed (what could not
be read, such as one shard's lag probe, is listed under ``problems``; a store
that does not exist yet is one with no checkpoints, said in a note); 1 when the
stream is missing or the store or the stream unreachable; 2 for a bad config value.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from kinesis_spout.config import SpoutConfig
from kinesis_spout.config.load import config_from_args
from kinesis_spout.errors import ConfigError
from kinesis_spout.status.collect import StatusInputs, collect, probe_starts
from kinesis_spout.status.model import LagProbe, StatusReport
from kinesis_spout.status.render import to_json
from kinesis_spout.status.sources_deadletters import count_dead_letters
from kinesis_spout.status.sources_kinesis import probe_lags, read_stream
from kinesis_spout.status.sources_store import read_store
from kinesis_spout.status.table import to_table


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document (docs/operations.md)"
    )
    parser.add_argument(
        "--no-lag",
        action="store_true",
        help="no lag probes (a GetShardIterator and a GetRecords per shard)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="longest wait for each call (default: 10)",
    )


def gather(
    config: SpoutConfig,
    *,
    lag: bool = True,
    timeout: float = 10.0,
    client: Any = None,
    now: datetime | None = None,
) -> StatusReport:
    """Read the store, the stream and the dead-letter target; assemble the report."""
    if not timeout > 0:
        raise ConfigError("timeout", timeout, "a number of seconds > 0")
    store = read_store(
        config.checkpoint_store,
        config.job_name,
        config.stream_name,
        zk_auth=config.zk_auth,
        # A short session: a ZooKeeper that does not answer is given up within the timeout.
        zk_session_timeout=min(config.zk_session_timeout, timeout),
        timeout=timeout,
        region=config.region,
        profile=config.profile,
        role=config.assumed_role,
    )
    client = client if client is not None else _client(config, timeout)
    stream, calls = read_stream(client, config)
    lags: dict[str, LagProbe] = {}
    if lag:
        starts = probe_starts(
            stream.shards,
            store.checkpoints,
            config.initial_position.value,
            config.initial_timestamp,
        )
        lags, probe_calls = probe_lags(client, config.stream_name, starts)
        calls += probe_calls
    dead, dead_problem = _dead_letters(config)
    problems = [f"{shard}: lag not known: {p.error}" for shard, p in lags.items() if p.error]
    if dead_problem:
        problems.append(dead_problem)
    inputs = StatusInputs(
        job=config.job_name,
        stream=config.stream_name,
        stream_status=stream.status,
        checkpoint_store=config.checkpoint_store,
        dead_letter=config.dead_letter,
        initial_position=config.initial_position.value,
        shards=stream.shards,
        checkpoints=store.checkpoints,
        job_lease=store.job_lease,
        leases=store.leases,
        workers=store.workers,
        lags=lags,
        dead_letters=dead,
        kinesis_calls=calls,
        problems=tuple(problems),
        store_missing=store.missing,
    )
    return collect(inputs, now or datetime.now(UTC))


def _dead_letters(config: SpoutConfig) -> tuple[dict[str, int] | None, str | None]:
    """The dead letters per shard of the config's target (or why not known)."""
    return count_dead_letters(
        config.dead_letter,
        config.job_name,
        config.stream_name,
        profile=config.profile,
        role=config.assumed_role,
    )


def _client(config: SpoutConfig, timeout: float) -> Any:
    """A Kinesis client for status's one-shot calls (botocore's standard retries)."""
    from kinesis_spout.kinesis.client import make_client

    return make_client(
        config.endpoint_url,
        config.region,
        profile=config.profile,
        role=config.assumed_role,
        connect_timeout=timeout,
        read_timeout=timeout,
        one_shot=True,
    )


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Without ``--verbose``, only the report speaks: connection chatter would bury what
    it says went wrong. The logging levels are put back afterwards (``cli.main`` may run
    in a process that goes on)."""
    if verbose:
        yield
        return
    root, ours = logging.getLogger(), logging.getLogger("kinesis_spout")
    levels = root.level, ours.level
    root.setLevel(logging.WARNING)
    ours.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        root.setLevel(levels[0])
        ours.setLevel(levels[1])


def cmd_status(args: argparse.Namespace) -> int:
    """Print the status; see the module docstring for the exit status."""
    with _quiet(getattr(args, "verbose", False)):
        config = config_from_args(args)
        # one client for every stream (a bad timeout: gather's error names it)
        client = _client(config, args.timeout) if args.timeout > 0 else None
        reports = [
            gather(one, lag=not args.no_lag, timeout=args.timeout, client=client)
            for one in config.per_stream()
        ]
    if args.json:
        print(to_json(*reports))
    else:  # one table per stream (--stream NAME: that one)
        print("\n\n".join(to_table(r) for r in reports))
    return 0
