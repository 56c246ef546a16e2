"""``kinesis-spout demo``: the word-count job on a local Kinesis emulator.

Each run starts moto's Kinesis server, creates the demo stream, puts the sample
sentences, runs the word-count job with ``spark-submit`` on ``local[2]`` (file
checkpoints, JSON-lines dead letters), prints the word counts and stops the emulator;
everything it keeps is under ``--output``. moto keeps streams in memory only, so run
``k`` puts the same records in the same order as the runs before it (the same shard ids
and sequence numbers) and then one new chunk: the job resumes after its checkpoints, and
the demo checks that the counts over all runs match every good sentence put, each
poison record dead-lettered once. docs/spark-job.md ("The demo") says more.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from kinesis_spout.errors import KinesisSpoutError

STREAM = "wordcount-demo"
JOB = "wordcount-demo"
PROCESS = "kinesis_spout.examples.wordcount:job"
STATE_FILE = "demo-state.json"


class DemoError(KinesisSpoutError):
    """The demo's output directory does not match what this run would do."""


#: Dead letters listed one per line in the demo's report (the rest are counted).
_DEAD_SHOWN = 10


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", default="./demo-output", metavar="DIR", help="where results are kept"
    )
    parser.add_argument(
        "--sentences", type=int, default=200, help="new sentences per run (default 200)"
    )
    parser.add_argument("--shards", type=int, default=2, help="shards of the demo stream")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--fresh", action="store_true", help="delete DIR first: start over")


def say(text: str) -> None:
    print(f"== {text}", flush=True)


def _load_state(out: Path, sentences: int, shards: int) -> dict[str, Any]:
    path = out / STATE_FILE
    if not path.exists():
        if (out / "checkpoints").exists() or (out / "wordcounts").exists():
            raise DemoError(f"{out} has results but no {STATE_FILE}: use --fresh to start over")
        return {"runs": 0, "sentences": sentences, "shards": shards}
    state: dict[str, Any] = json.loads(path.read_text())
    if (state["sentences"], state["shards"]) != (sentences, shards):
        raise DemoError(
            f"{out} was made with --sentences {state['sentences']} --shards {state['shards']}; "
            "use the same values to resume, or --fresh to start over"
        )
    if state["runs"] and not (out / "checkpoints").exists():
        raise DemoError(f"{out}/checkpoints is gone: use --fresh to start over")
    return state


def _print_checkpoints(store_url: str, title: str) -> dict[str, str | None]:
    from kinesis_spout.checkpoint import open_store

    store = open_store(store_url, JOB)
    try:
        cps = store.load(STREAM)
    finally:
        store.close()
    if not cps:
        say(f"{title}: none (the job starts at TRIM_HORIZON)")
        return {}
    say(f"{title}:")
    for shard, cp in sorted(cps.items()):
        print(f"     {shard}  done up to sequence number {cp.sequence_number}", flush=True)
    return {s: cp.sequence_number for s, cp in cps.items()}


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo once; 0 if the results check out."""
    from kinesis_spout.deadletter import read_dead_letters
    from kinesis_spout.examples.wordcount import expected_counts, is_poison, read_counts

    if args.sentences < 1 or args.shards < 1:
        raise DemoError("--sentences and --shards must be at least 1")
    out = Path(args.output).resolve()
    if args.fresh and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    state = _load_state(out, args.sentences, args.shards)
    run = state["runs"] + 1
    store_url = f"file://{out / 'checkpoints'}"
    say(f"kinesis-spout demo, run {run}: Storm's word count on Kinesis with Spark ({out})")
    code, everything = _run_on_emulator(args, out, run, store_url)
    if code != 0:
        say(f"the job exited with {code}")
        return code
    state["runs"] = run
    (out / STATE_FILE).write_text(json.dumps(state))
    return _report(
        out,
        store_url,
        read_counts(out / "wordcounts"),
        expected_counts(everything),
        read_dead_letters(out / "dead-letter"),
        sum(is_poison(d) for _, d in everything),
    )


def _run_on_emulator(
    args: argparse.Namespace, out: Path, run: int, store_url: str
) -> tuple[int, list[tuple[str, bytes]]]:
    """Start moto, put every run's sentences so far, run the job; (exit code, records)."""
    from kinesis_spout.examples.wordcount import is_poison, sample_records
    from kinesis_spout.testing.servers import MotoServer
    from kinesis_spout.testing.streams import create_stream, emulator_client, put_records

    chunks = [sample_records(c, args.sentences) for c in range(run)]
    everything = [item for chunk in chunks for item in chunk]
    new_poison = sum(is_poison(d) for _, d in chunks[-1])
    with MotoServer() as moto:
        say(f"started the Kinesis emulator (moto server) at {moto.endpoint_url}")
        client = emulator_client(moto.endpoint_url)
        create_stream(client, STREAM, args.shards)
        put = put_records(client, STREAM, everything)
        earlier = len(everything) - len(chunks[-1])
        say(
            f"stream {STREAM!r} ({args.shards} shards): put {len(everything)} records = "
            f"{earlier} from earlier runs (same sequence numbers) + {len(chunks[-1])} new, "
            f"{new_poison} of them poison"
        )
        _print_checkpoints(store_url, "checkpoints before this run")
        code = _run_job(args, out, moto.endpoint_url, store_url)
        if code == 0 and not _print_status(client, out, moto.endpoint_url, store_url, put):
            code = 1
    say("stopped the emulator")
    return code, everything


def _print_status(
    client: Any, out: Path, endpoint: str, store_url: str, put: list[tuple[str, str]]
) -> bool:
    """``kinesis-spout status`` of the job, while the emulator still runs; True when every
    shard's checkpoint is at the last record put into it."""
    from kinesis_spout.config import SpoutConfig
    from kinesis_spout.status.command import gather
    from kinesis_spout.status.table import to_table

    config = SpoutConfig(
        stream_name=STREAM,
        job_name=JOB,
        endpoint_url=endpoint,
        checkpoint_store=store_url,
        dead_letter=str(out / "dead-letter"),
    )
    report = gather(config, client=client)
    say("kinesis-spout status of the job, while the emulator still runs:")
    print(to_table(report), flush=True)
    last = dict(put)  # shard -> its last sequence (put returns them in order)
    saved = {s.shard_id: s.checkpoint.sequence_number for s in report.shards if s.checkpoint}
    ok = saved == last
    say(
        "status: every shard's checkpoint is at the last record put into it"
        if ok
        else f"status: checkpoints {saved} != last records {last}: MISMATCH"
    )
    return ok


def _run_job(args: argparse.Namespace, out: Path, endpoint: str, store_url: str) -> int:
    """``kinesis-spout run`` of the word count, as a user would type it."""
    from kinesis_spout.config.load import add_config_arguments
    from kinesis_spout.examples.wordcount import CONFIG_FILE, OUTPUT_ENV
    from kinesis_spout.spark.submit import add_run_arguments, cmd_run

    argv = [
        "--config",
        str(CONFIG_FILE),
        "--process",
        PROCESS,
        "--master",
        args.master,
        "--spark-conf",
        "spark.ui.enabled=false",
        "--spark-conf",
        "spark.log.level=ERROR",
        "--endpoint-url",
        endpoint,
        "--stream-name",
        STREAM,
        "--job-name",
        JOB,
        "--checkpoint-store",
        store_url,
        "--dead-letter",
        str(out / "dead-letter"),
    ]
    say("running the job: kinesis-spout run " + " ".join(argv))
    os.environ[OUTPUT_ENV] = str(out / "wordcounts")
    parser = argparse.ArgumentParser(prog="kinesis-spout run")
    add_config_arguments(parser)
    add_run_arguments(parser)
    return int(cmd_run(parser.parse_args(argv)))


def _report(
    out: Path,
    store_url: str,
    counts: Counter[str],
    expected: Counter[str],
    dead: list[dict[str, Any]],
    poison: int,
) -> int:
    say("word counts (all runs):")
    for word, n in counts.most_common(12):
        print(f"     {word:<10} {n}", flush=True)
    total, want = sum(counts.values()), sum(expected.values())
    counts_ok = counts == expected
    say(
        f"{total} words counted, {want} expected from the good sentences put so far: "
        + ("every sentence counted exactly once" if counts_ok else "MISMATCH")
    )
    ids = Counter(str(d["message_id"]) for d in dead)
    dead_ok = len(ids) == poison and all(n == 1 for n in ids.values())
    say(
        f"dead letters: {len(dead)}, for the {poison} poison records put so far"
        + (", each dead-lettered once" if dead_ok else ": MISMATCH")
        + f", in {out / 'dead-letter'}"
    )
    shown = dead[:_DEAD_SHOWN]
    for d in shown:
        print(f"     {d['message_id']}  after {d['attempts']} attempts: {d['error']}", flush=True)
    if len(dead) > len(shown):
        print(f"     ... and {len(dead) - len(shown)} more in {out / 'dead-letter'}", flush=True)
    _print_checkpoints(store_url, f"checkpoints now ({store_url})")
    say(f"word count files: {out / 'wordcounts'}")
    say("run the demo again to resume from the checkpoints with new sentences; --fresh starts over")
    if not (counts_ok and dead_ok):
        print("demo check failed: see the MISMATCH above", file=sys.stderr)
        return 1
    return 0
