"""``kinesis-spout dead-letters list|redrive``: look at dead letters and put them back.

The target, job and streams come from the usual config (``--stream NAME`` picks
streams); a target that does not exist yet holds no dead letters. ``list`` prints one
line per entry, or each full entry as JSON; ``redrive`` puts the entries back on a stream
with PutRecords, at most once per entry through the target's re-drive log
(:mod:`kinesis_spout.deadletter.redrive`), and with ``--delete`` then removes what it put,
safely while a reader writes more (:mod:`kinesis_spout.deadletter.remove`). ``--shard``
and ``--reason`` select entries for both. The flags and the output: docs/operations.md
("Dead letters: list and re-drive").
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kinesis_spout.config import DEAD_LETTER_REASONS, SpoutConfig
from kinesis_spout.config.load import config_from_args
from kinesis_spout.deadletter.redrive import Redriven
from kinesis_spout.errors import ConfigError, KinesisSpoutError
from kinesis_spout.retrying import never, retrying
from kinesis_spout.words import plural, quoted
from tracker import ExponentialBackoff

logger = logging.getLogger(__name__)

Entry = dict[str, Any]
PUT_BATCH = 500
PUT_ATTEMPTS = 8
PUT_BACKOFF = ExponentialBackoff(0.1, cap=5.0)
"""The wait before putting refused entries again: 0.1 s, doubling, at most 5 s."""


class DeadLetterCommandError(KinesisSpoutError):
    """A bad argument or an unusable dead-letter target."""


@dataclass(slots=True)
class Source:
    """One file or one S3 object of dead letters."""

    name: str
    entries: list[dict[str, Any]]


def _add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shard", metavar="ID", help="only this shard's entries")
    parser.add_argument("--reason", choices=DEAD_LETTER_REASONS, help="only this reason")


def add_list_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``dead-letters list``."""
    _add_selection(parser)
    parser.add_argument("--json", action="store_true", help="whole entries as JSON lines")


def add_redrive_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``dead-letters redrive``."""
    _add_selection(parser)
    parser.add_argument(
        "--to-stream", metavar="NAME", help="put onto this stream (default: the entry's own)"
    )
    parser.add_argument(
        "--delete", action="store_true", help="then remove the re-driven entries (default: keep)"
    )
    parser.add_argument("--dry-run", action="store_true", help="only show what would be put")


def load_sources(cfg: SpoutConfig) -> list[Source]:
    """Every dead-letter file or object of the configured job and stream (``cfg`` is one
    stream's); none when the target does not exist yet."""
    target = cfg.dead_letter
    if target.lower() == "none":
        raise ConfigError(
            "dead_letter", target, "a directory or s3:// target (none keeps no dead letters)"
        )
    if target.startswith("s3://"):
        from kinesis_spout.deadletter.s3 import (
            iter_s3_keys,
            key_prefix,
            parse_s3_url,
            read_s3_object,
        )
        from kinesis_spout.deadletter.s3 import s3_client as make

        bucket, prefix = parse_s3_url(target)
        client = make(region=cfg.region, profile=cfg.profile, role=cfg.assumed_role)
        base = key_prefix(prefix, cfg.job_name, cfg.stream_name)
        return [
            Source(f"s3://{bucket}/{k}", read_s3_object(client, bucket, k))
            for k in iter_s3_keys(client, bucket, base)
        ]
    root = Path(target) / cfg.job_name / cfg.stream_name
    if Path(target).exists() and not Path(target).is_dir():
        raise ConfigError("dead_letter", target, "a directory (this is a file)")
    out = []
    for p in sorted(root.glob("*.jsonl")):
        entries = []
        for line in p.read_text(encoding="utf-8").splitlines():
            if line.strip():
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    print(f"skipping a torn line in {p}", file=sys.stderr)
        out.append(Source(str(p), entries))
    return out


def selected(entry: dict[str, Any], args: argparse.Namespace) -> bool:
    if args.shard and entry.get("shard_id") != args.shard:
        return False
    return not (args.reason and entry.get("reason", "exhausted") != args.reason)


def entry_line(e: dict[str, Any], stream: str) -> str:
    """One entry of ``dead-letters list``: stream, shard, sequence, reason, attempts,
    when, error (cut to 120 characters)."""
    error = (e.get("error") or "").replace("\n", " ")
    sub = e.get("sub_sequence_number") or 0
    return (
        f"{e.get('stream') or stream}\t{e.get('shard_id')}\t{e.get('sequence_number')}:{sub}\t"
        f"{e.get('reason', 'exhausted')}\t{e.get('attempts')} attempts\t"
        f"{e.get('dead_lettered_at')}\t{error[:120]}"
    )


@dataclass(slots=True)
class StreamLetters:
    """One stream's dead letters: its config, its files or objects, the entries chosen."""

    config: SpoutConfig
    sources: list[Source]
    chosen: list[Entry]


def _chosen(args: argparse.Namespace) -> tuple[SpoutConfig, list[StreamLetters]]:
    cfg = config_from_args(args)
    out = []
    for one in cfg.per_stream():
        sources = load_sources(one)
        out.append(
            StreamLetters(
                one, sources, [e for s in sources for e in s.entries if selected(e, args)]
            )
        )
    return cfg, out


def _where(cfg: SpoutConfig) -> str:
    streams = cfg.stream_names
    return f"job {cfg.job_name!r}, {'stream' if len(streams) == 1 else 'streams'} {quoted(streams)}"


def cmd_list(args: argparse.Namespace) -> int:
    """``dead-letters list``: one line per entry, or whole entries with ``--json``."""
    cfg, streams = _chosen(args)
    for one in streams:
        for e in one.chosen:
            print(json.dumps(e) if args.json else entry_line(e, one.config.stream_name))
    if not args.json:
        n = sum(len(one.chosen) for one in streams)
        print(f"{plural(n, 'dead letter')} in {cfg.dead_letter} ({_where(cfg)})")
    return 0


def cmd_redrive(args: argparse.Namespace) -> int:
    """``dead-letters redrive``: put the selected entries of each stream on a stream (see
    the module doc)."""
    cfg, streams = _chosen(args)
    client = _kinesis_client(cfg)
    for one in streams:
        to = args.to_stream or one.config.stream_name
        if args.dry_run:
            check_stream(client, to)
            for e in one.chosen:
                print(
                    f"would put {one.config.stream_name}/{e.get('message_id')} "
                    f"({e.get('partition_key')}) on {to}"
                )
            print(
                f"{len(one.chosen)} to re-drive from stream {one.config.stream_name!r} onto {to!r}"
            )
            continue
        redrive(one.config, one.sources, one.chosen, to, delete=args.delete, client=client)
    return 0


def _progress(done: int, total: int) -> None:
    print(f"  put {done}/{total}", file=sys.stderr, flush=True)


def _kinesis_client(cfg: SpoutConfig) -> Any:
    from kinesis_spout.kinesis.client import make_client

    return make_client(
        cfg.endpoint_url, cfg.region, profile=cfg.profile, role=cfg.assumed_role, one_shot=True
    )


def _s3(cfg: SpoutConfig) -> Any:
    if not cfg.dead_letter.startswith("s3://"):
        return None
    from kinesis_spout.deadletter.s3 import s3_client

    return s3_client(one_shot=True, region=cfg.region, profile=cfg.profile, role=cfg.assumed_role)


def redrive(
    cfg: SpoutConfig,
    sources: list[Source],
    entries: list[dict[str, Any]],
    stream: str,
    *,
    delete: bool = False,
    client: Any = None,
    batch: int = PUT_BATCH,
    progress: Callable[[int, int], None] | None = _progress,
) -> int:
    """Put ``entries`` not yet re-driven onto ``stream``, logging each accepted one; with
    ``delete``, then remove every selected entry that is on the stream from the target."""
    from kinesis_spout.deadletter.redrive import open_redrive_log

    s3 = _s3(cfg)
    log = open_redrive_log(cfg, s3)
    done = log.done(stream)
    todo = [e for e in entries if str(e.get("message_id")) not in done]
    source = cfg.stream_name
    if len(todo) < len(entries):
        print(
            f"skipping {len(entries) - len(todo)} of stream {source!r} "
            f"already re-driven onto {stream!r}"
        )
    client = client if client is not None else _kinesis_client(cfg)
    check_stream(client, stream)
    put = put_entries(client, stream, todo, progress=progress, batch=batch, record=log.record)
    print(
        f"re-drove {put} of {plural(len(todo), 'dead letter')} of stream {source!r} "
        f"onto stream {stream!r}"
    )
    if delete:
        ids = {str(e.get("message_id")) for e in entries}  # all of them are on the stream now
        removed, emptied = remove_entries(sources, ids, s3)
        print(
            f"removed {plural(removed, 'entry', 'entries')} of stream {source!r} "
            f"({emptied} files or objects emptied)"
        )
    return 0


def check_stream(client: Any, stream: str) -> None:
    """:class:`DeadLetterCommandError` naming the stream if it cannot be put to."""
    from kinesis_spout.kinesis.api import KinesisApi

    try:
        KinesisApi(client, stream).check_stream()
    except KinesisSpoutError as exc:
        raise DeadLetterCommandError(str(exc)) from None


def put_entries(
    client: Any,
    stream: str,
    entries: Sequence[dict[str, Any]],
    progress: Callable[[int, int], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    batch: int = PUT_BATCH,
    record: Callable[[list[Redriven]], None] | None = None,
) -> int:
    """PutRecords of every entry (partition key and payload); failed ones are put again
    with backoff, :data:`PUT_ATTEMPTS` tries in all. Each answer's accepted entries go
    to ``record`` before the next call. Raises naming the stream if some are still
    refused or a call fails."""
    done = 0
    for i in range(0, len(entries), batch):
        pending = _put_batch(client, stream, entries[i : i + batch], sleep, record)
        if pending:
            raise DeadLetterCommandError(
                f"stream {stream!r} refused {pending} records "
                f"{PUT_ATTEMPTS} times; run it again to put what is left"
            )
        done = min(i + batch, len(entries))
        if progress is not None:
            progress(done, len(entries))
    return done


def _put_batch(
    client: Any,
    stream: str,
    entries: Sequence[Entry],
    sleep: Callable[[float], None],
    record: Callable[[list[Redriven]], None] | None,
) -> int:
    """Put ``entries``, the refused ones again after a backoff
    (:func:`~kinesis_spout.retrying.retrying`); how many are still refused."""
    pending = list(entries)

    def put() -> int:
        nonlocal pending
        results = _put(client, stream, pending)
        accepted = [
            Redriven(str(e.get("message_id")), stream, str(r["SequenceNumber"]))
            for e, r in zip(pending, results, strict=True)
            if "ErrorCode" not in r
        ]
        if accepted and record is not None:
            record(accepted)
        pending = [e for e, r in zip(pending, results, strict=True) if "ErrorCode" in r]
        return len(pending)

    return retrying(
        f"PutRecords {stream}",
        put,
        backoff=PUT_BACKOFF,
        attempts=PUT_ATTEMPTS,
        retriable=never,
        again=lambda refused: f"{refused} records refused" if refused else None,
        sleep=sleep,
        level=logging.DEBUG,
        logger=logger,
    )


def _put(client: Any, stream: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One PutRecords call; its per-record results. botocore errors become one line."""
    from kinesis_spout.kinesis.api import KinesisApi

    records = [
        {"PartitionKey": e["partition_key"], "Data": base64.b64decode(e["data_base64"])}
        for e in entries
    ]
    try:
        resp = KinesisApi(client, stream).call(
            f"PutRecords {stream}", client.put_records, StreamName=stream, Records=records
        )
    except KinesisSpoutError as exc:
        raise DeadLetterCommandError(f"{exc}; run it again to put what is left") from None
    results: list[dict[str, Any]] = resp["Records"]
    return results


def remove_entries(sources: list[Source], ids: set[str], s3: Any = None) -> tuple[int, int]:
    """Remove the entries with ``ids`` from every source that holds one, safely beside
    running writers (:mod:`kinesis_spout.deadletter.remove`): (entries removed, files or
    objects emptied)."""
    from kinesis_spout.deadletter.remove import remove_from_file, remove_from_s3

    removed = emptied = 0
    for s in sources:
        if not any(str(e.get("message_id")) in ids for e in s.entries):
            continue
        if s.name.startswith("s3://"):
            from kinesis_spout.deadletter.s3 import parse_s3_url

            bucket, key = parse_s3_url(s.name)
            n, gone = remove_from_s3(s3, bucket, key, ids)
        else:
            n, gone = remove_from_file(Path(s.name), ids)
        removed += n
        emptied += gone
    return removed, emptied
