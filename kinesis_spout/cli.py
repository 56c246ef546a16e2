"""The ``kinesis-spout`` command.

Subcommands are registered in :data:`COMMANDS`; each module that adds one
keeps its own argument parsing.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence

from kinesis_spout import __version__
from kinesis_spout.config_load import add_config_arguments, config_from_args
from kinesis_spout.errors import KinesisSpoutError

log = logging.getLogger("kinesis_spout")
QUIET_LOGGERS = ("botocore", "boto3", "urllib3", "kazoo")
"""Libraries whose INFO lines only ``--verbose`` shows."""


def _cmd_config(args: argparse.Namespace) -> int:
    """Validate the config and print it (secrets masked)."""
    cfg = config_from_args(args)
    print(json.dumps(cfg.redacted(), indent=2, default=str))
    return 0


def _cmd_checkpoints(args: argparse.Namespace) -> int:
    """Print the stored checkpoints of the configured stream."""
    from kinesis_spout.checkpoint.factory import open_config_store

    cfg = config_from_args(args)
    store = open_config_store(cfg)
    try:
        cps = store.load(cfg.stream_name)
    finally:
        store.close()
    for shard_id, cp in sorted(cps.items()):
        end = " (shard end)" if cp.shard_end else ""
        print(f"{shard_id}\t{cp.sequence_number}:{cp.sub_sequence_number}{end}\t{cp.updated_at}")
    if not cps:
        print(f"no checkpoints for job {cfg.job_name!r}, stream {cfg.stream_name!r}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    """spark-submit the Spark job (kinesis_spout/spark/job.py)."""
    from kinesis_spout.spark.submit import cmd_run

    return cmd_run(args)


def _cmd_demo(args: argparse.Namespace) -> int:
    """The word-count demo on a local emulator."""
    from kinesis_spout.examples.demo import cmd_demo

    return cmd_demo(args)


def _cmd_dead_letters(args: argparse.Namespace) -> int:
    """List dead letters, or put them back on a stream."""
    from kinesis_spout.deadletter_cli import cmd_dead_letters

    return cmd_dead_letters(args)


def _cmd_status(args: argparse.Namespace) -> int:
    """Per shard: checkpoint, state, owner, lag, dead letters; and the job lease."""
    from kinesis_spout.status.command import cmd_status

    return cmd_status(args)


def _status_arguments(parser: argparse.ArgumentParser) -> None:
    from kinesis_spout.status.command import add_status_arguments

    add_status_arguments(parser)


def _dead_letter_arguments(parser: argparse.ArgumentParser) -> None:
    from kinesis_spout.deadletter_cli import add_arguments

    add_arguments(parser)


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    from kinesis_spout.spark.submit import add_run_arguments

    add_run_arguments(parser)


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    from kinesis_spout.examples.demo import add_demo_arguments

    add_demo_arguments(parser)


Handler = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, tuple[str, Handler, bool]] = {
    "config": ("validate the configuration and print it", _cmd_config, True),
    "checkpoints": ("show the stored checkpoints", _cmd_checkpoints, True),
    "status": (
        "per shard: checkpoint, state, owner, lag, dead letters; the job lease (--json)",
        _cmd_status,
        True,
    ),
    "run": ("run the Spark job with spark-submit (--process module:function)", _cmd_run, True),
    "demo": ("word count on a local Kinesis emulator with Spark (resumes)", _cmd_demo, False),
    "dead-letters": ("list dead letters, or re-drive them onto a stream", _cmd_dead_letters, True),
}
# Commands with flags of their own beyond the config flags.
EXTRA_ARGUMENTS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "run": _run_arguments,
    "demo": _demo_arguments,
    "dead-letters": _dead_letter_arguments,
    "status": _status_arguments,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kinesis-spout", description="Read Kinesis shards with Storm-grade reliability."
    )
    parser.add_argument("--version", action="version", version=__version__)
    parser.add_argument("-v", "--verbose", action="store_true", help="DEBUG logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, handler, takes_config) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if takes_config:
            add_config_arguments(p)
        if name in EXTRA_ARGUMENTS:
            EXTRA_ARGUMENTS[name](p)
        p.set_defaults(handler=handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # "Found credentials in environment variables." and the like
        for noisy in QUIET_LOGGERS:
            logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return int(args.handler(args))
    except KinesisSpoutError as exc:
        print(f"kinesis-spout: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
