"""``kinesis-spout dead-letters list|redrive``: look at dead letters and put them back.

The target, job and stream come from the usual config (``dead_letter``,
``job_name``, ``stream_name``): a directory of JSON lines files or an
``s3://bucket/prefix``.

* ``list`` prints one line per entry (shard, sequence, reason, attempts, when,
  error), or with ``--json`` each full entry (payload included) as one JSON
  object per line.
* ``redrive`` puts the entries' records back on a stream (``--to-stream``,
  default the configured one) with their partition keys and payloads, with
  PutRecords in batches of 500; failed entries of a batch are put again with
  backoff. ``--delete`` then removes the re-driven entries from the target
  (run it while the job is stopped when the target is a directory: the job
  appends to the same files). ``--dry-run`` shows what would be put.

``--shard`` and ``--reason`` select entries for both.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kinesis_spout.config import DEAD_LETTER_REASONS, SpoutConfig
from kinesis_spout.config_load import config_from_args
from kinesis_spout.errors import KinesisSpoutError

PUT_BATCH = 500
PUT_ATTEMPTS = 8


class DeadLetterCommandError(KinesisSpoutError):
    """A bad argument or an unusable dead-letter target."""


@dataclass(slots=True)
class Source:
    """One file or one S3 object of dead letters."""

    name: str
    entries: list[dict[str, Any]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("list", "redrive"), help="what to do")
    parser.add_argument("--json", action="store_true", help="list: full entries as JSON lines")
    parser.add_argument("--shard", help="only this shard's entries")
    parser.add_argument("--reason", choices=DEAD_LETTER_REASONS, help="only this reason")
    parser.add_argument("--to-stream", help="redrive: put onto this stream (default: stream_name)")
    parser.add_argument("--delete", action="store_true", help="redrive: then remove them")
    parser.add_argument("--dry-run", action="store_true", help="redrive: only show what")


def load_sources(cfg: SpoutConfig) -> list[Source]:
    """Every dead-letter file or object of the configured job and stream."""
    target = cfg.dead_letter
    if target.lower() == "none":
        raise DeadLetterCommandError(
            "dead_letter", target, "a directory or s3:// target (none keeps no dead letters)"
        )
    if target.startswith("s3://"):
        from kinesis_spout.deadletter_s3 import (
            iter_s3_keys,
            key_prefix,
            parse_s3_url,
            read_s3_object,
        )
        from kinesis_spout.deadletter_s3 import s3_client as make

        bucket, prefix = parse_s3_url(target)
        client = make()
        base = key_prefix(prefix, cfg.job_name, cfg.stream_name)
        return [
            Source(f"s3://{bucket}/{k}", read_s3_object(client, bucket, k))
            for k in iter_s3_keys(client, bucket, base)
        ]
    root = Path(target) / cfg.job_name / cfg.stream_name
    if not Path(target).is_dir():
        raise DeadLetterCommandError("dead_letter", target, "an existing directory")
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


def entry_line(e: dict[str, Any]) -> str:
    error = (e.get("error") or "").replace("\n", " ")
    sub = e.get("sub_sequence_number") or 0
    return (
        f"{e.get('shard_id')}\t{e.get('sequence_number')}:{sub}\t"
        f"{e.get('reason', 'exhausted')}\t{e.get('attempts')} attempts\t"
        f"{e.get('dead_lettered_at')}\t{error[:120]}"
    )


def cmd_dead_letters(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    sources = load_sources(cfg)
    chosen = [(s, e) for s in sources for e in s.entries if selected(e, args)]
    if args.action == "list":
        for _, e in chosen:
            print(json.dumps(e) if args.json else entry_line(e))
        if not args.json:
            print(f"{len(chosen)} dead letters in {cfg.dead_letter} (job {cfg.job_name!r})")
        return 0
    stream = args.to_stream or cfg.stream_name
    if args.dry_run:
        for _, e in chosen:
            print(f"would put {e.get('message_id')} ({e.get('partition_key')}) on {stream}")
        return 0
    client = _kinesis_client(cfg)
    put = put_entries(client, stream, [e for _, e in chosen], progress=_progress)
    print(f"re-drove {put} of {len(chosen)} dead letters onto stream {stream!r}")
    if args.delete:
        removed = remove_entries(sources, {id(e) for _, e in chosen})
        print(f"removed {put} entries ({removed} files or objects emptied)")
    return 0


def _progress(done: int, total: int) -> None:
    print(f"  put {done}/{total}", file=sys.stderr, flush=True)


def _kinesis_client(cfg: SpoutConfig) -> Any:
    from kinesis_spout.kinesis.client import make_client

    return make_client(cfg.endpoint_url, cfg.region)


def put_entries(
    client: Any,
    stream: str,
    entries: Sequence[dict[str, Any]],
    progress: Callable[[int, int], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """PutRecords of every entry (partition key and payload); failed ones are put again
    with backoff. Raises naming the stream if some are still refused."""
    done = 0
    for i in range(0, len(entries), PUT_BATCH):
        batch = [
            {"PartitionKey": e["partition_key"], "Data": base64.b64decode(e["data_base64"])}
            for e in entries[i : i + PUT_BATCH]
        ]
        for attempt in range(PUT_ATTEMPTS):
            resp = client.put_records(StreamName=stream, Records=batch)
            results = resp["Records"]
            batch = [b for b, r in zip(batch, results, strict=True) if "ErrorCode" in r]
            if not batch:
                break
            sleep(min(0.1 * 2**attempt, 5.0))
        if batch:
            raise DeadLetterCommandError(
                "to_stream", stream, f"a stream that accepts the records ({len(batch)} refused)"
            )
        done = min(i + PUT_BATCH, len(entries))
        if progress is not None:
            progress(done, len(entries))
    return done


def remove_entries(sources: list[Source], ids: set[int]) -> int:
    """Rewrite each source without the entries in ``ids`` (by object id); a source
    left empty is deleted. Returns how many were deleted."""
    emptied = 0
    for s in sources:
        keep = [e for e in s.entries if id(e) not in ids]
        if len(keep) == len(s.entries):
            continue
        body = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in keep)
        if s.name.startswith("s3://"):
            from kinesis_spout.deadletter_s3 import parse_s3_url, s3_client

            bucket, key = parse_s3_url(s.name)
            client = s3_client()
            if keep:
                client.put_object(Bucket=bucket, Key=key, Body=body.encode("utf-8"))
            else:
                client.delete_object(Bucket=bucket, Key=key)
        elif keep:
            tmp = s.name + ".tmp"
            Path(tmp).write_text(body, encoding="utf-8")
            os.replace(tmp, s.name)
        else:
            os.remove(s.name)
        emptied += not keep
    return emptied
