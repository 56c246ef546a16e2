"""The ``kinesis-spout`` command.

Each subcommand takes the config flags of the fields it uses (``run`` and
``config`` take every field, ``status`` the store's, the stream's and AWS's),
plus flags of its own, added by the module that implements it. A flag a
subcommand does not take is an error that names the close match, or the
subcommands that take it; no flag is taken by an abbreviation. The operations
commands (``status``, ``checkpoints``, ``dead-letters``) cover every stream of
the config, or those given by ``--stream NAME`` (repeatable).

Errors are one line on stderr. Exit status: 0 done; 1 the command could not do
its work (a store, stream or endpoint missing or unreachable); 2 bad input (a
flag, a config value); 3 the job is running (a lease another reader holds).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from kinesis_spout import __version__
from kinesis_spout.config.load import (
    AWS_FIELDS,
    STORE_FIELDS,
    add_config_arguments,
    config_from_args,
    did_you_mean,
)
from kinesis_spout.errors import ConfigError, KinesisSpoutError
from kinesis_spout.words import one_line

log = logging.getLogger("kinesis_spout")
QUIET_LOGGERS = ("botocore", "boto3", "urllib3", "kazoo")
"""Libraries whose INFO lines only ``--verbose`` shows."""

LOGGING_COMMANDS = frozenset({"run", "demo"})
"""Commands whose INFO lines are shown without ``--verbose``: they run a job."""
Handler = Callable[[argparse.Namespace], int]
Adder = Callable[[argparse.ArgumentParser], None]
STREAM_FIELDS = ("stream_name", "streams")
"""Every operations command takes ``--stream NAME`` (repeatable) and ``--stream-name``."""
DEAD_LETTER_FIELDS = ("dead_letter", "job_name", *STREAM_FIELDS, "region", "profile")
CHECKPOINT_FIELDS = (*STORE_FIELDS, "streams")
STATUS_FIELDS = (
    *CHECKPOINT_FIELDS,
    *AWS_FIELDS,
    "dead_letter",
    "initial_position",
    "initial_timestamp",
)


def _cmd_config(args: argparse.Namespace) -> int:
    """Validate the config and print it (secrets masked)."""
    cfg = config_from_args(args)
    print(json.dumps(cfg.redacted(), indent=2, default=str))
    return 0


def _lazy(module: str, name: str) -> Callable[..., Any]:
    """The function ``name`` of ``module``, imported when called."""

    def call(*args: object) -> Any:
        import importlib

        return getattr(importlib.import_module(module), name)(*args)

    return call


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: its help, handler, the config fields it takes (None = every
    one), its own flags, and subcommands of its own."""

    help: str
    handler: Handler | None
    fields: Collection[str] | None = ()
    extra: Adder | None = None
    children: tuple[tuple[str, Command], ...] = ()
    usage: str | None = "%(prog)s [options]"


COMMANDS: dict[str, Command] = {
    "config": Command("validate the configuration and print it", _cmd_config, None, usage=None),
    "checkpoints": Command(
        "show the stored checkpoints (reset: move them, with the job stopped)",
        _lazy("kinesis_spout.checkpoint.reset_cli", "cmd_checkpoints"),
        CHECKPOINT_FIELDS,
        children=(
            (
                "reset",
                Command(
                    "move the checkpoint of one shard or all (refused while the job runs)",
                    _lazy("kinesis_spout.checkpoint.reset_cli", "cmd_reset"),
                    (*CHECKPOINT_FIELDS, *AWS_FIELDS),
                    _lazy("kinesis_spout.checkpoint.reset_cli", "add_reset_arguments"),
                    usage="%(prog)s\n"
                    "       (--shard ID | --all) (--to-trim-horizon | --to-latest |\n"
                    "        --to-timestamp T | --to-sequence S[:SUB]) [options]",
                ),
            ),
        ),
    ),
    "status": Command(
        "per shard: checkpoint, state, owner, lag, dead letters; the job lease (--json)",
        _lazy("kinesis_spout.status.command", "cmd_status"),
        STATUS_FIELDS,
        _lazy("kinesis_spout.status.command", "add_status_arguments"),
    ),
    "run": Command(
        "run the Spark job with spark-submit (--process module:function)",
        _lazy("kinesis_spout.spark.submit", "cmd_run"),
        None,
        _lazy("kinesis_spout.spark.submit", "add_run_arguments"),
        usage=None,
    ),
    "demo": Command(
        "word count on a local Kinesis emulator with Spark (resumes)",
        _lazy("kinesis_spout.examples.demo", "cmd_demo"),
        (),
        _lazy("kinesis_spout.examples.demo", "add_demo_arguments"),
    ),
    "dead-letters": Command(
        "list dead letters, or re-drive them onto a stream",
        None,
        children=(
            (
                "list",
                Command(
                    "print the dead letters (--json: whole entries)",
                    _lazy("kinesis_spout.deadletter.cli", "cmd_list"),
                    DEAD_LETTER_FIELDS,
                    _lazy("kinesis_spout.deadletter.cli", "add_list_arguments"),
                ),
            ),
            (
                "redrive",
                Command(
                    "put dead letters back on a stream (--delete: then remove them)",
                    _lazy("kinesis_spout.deadletter.cli", "cmd_redrive"),
                    (*DEAD_LETTER_FIELDS, "endpoint_url"),
                    _lazy("kinesis_spout.deadletter.cli", "add_redrive_arguments"),
                ),
            ),
        ),
    ),
}


class _Formatter(argparse.HelpFormatter):
    """Plain help, options and their help on one line where they fit."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30)


EXIT_DONE, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_RUNNING = 0, 1, 2, 3
"""The exit statuses of every subcommand (the module docstring says when each)."""
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


class CommandParser(argparse.ArgumentParser):
    """A parser that takes no abbreviated flag and says what went wrong in one line
    (``kinesis-spout status: error: ...``, exit 2), with the close match of a
    mistyped subcommand."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        m = _INVALID_CHOICE.search(message)
        if m is not None:
            choices = [c.strip().strip("'") for c in m.group(2).split(",")]
            message = f"unknown command {m.group(1)!r}" + did_you_mean(m.group(1), choices)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _add(
    sub: Any, name: str, cmd: Command, nested: bool, path: str, only: Collection[str] | None
) -> None:
    usage = cmd.usage if cmd.fields and not cmd.children else None
    p = sub.add_parser(name, help=cmd.help, description=cmd.help, usage=usage)
    if cmd.fields is None or cmd.fields:
        add_config_arguments(p, cmd.fields, nested=nested)
    if cmd.extra is not None and (only is None or name in only):
        cmd.extra(p)
    p.set_defaults(handler=cmd.handler, command_parser=p, command_path=path)
    if cmd.children:
        inner = p.add_subparsers(
            dest=f"{name}_action", required=cmd.handler is None, metavar="ACTION"
        )
        for child_name, child in cmd.children:
            _add(inner, child_name, child, bool(cmd.fields), f"{path} {child_name}", only)


def build_parser(only: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``only``, the flags of their own (which import the
    subcommand's module) only for the subcommands named there: ``kinesis-spout run``
    then starts ``spark-submit`` without importing the status command's AWS clients."""
    parser = CommandParser(
        prog="kinesis-spout", description="Read Kinesis shards with Storm-grade reliability."
    )
    parser.add_argument("--version", action="version", version=__version__)
    parser.add_argument("-v", "--verbose", action="store_true", help="DEBUG logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        _add(sub, name, cmd, False, name, only)
    return parser


def _flags_of(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}


def _commands_with(flag: str, parser: argparse.ArgumentParser, path: str = "") -> list[str]:
    """The subcommands (``dead-letters redrive``) whose parser takes ``flag``."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                child_path = f"{path} {name}".strip()
                if flag in _flags_of(child):
                    found.append(child_path)
                found += _commands_with(flag, child, child_path)
    return found


def unknown_argument_error(
    parser: argparse.ArgumentParser, command: argparse.ArgumentParser, path: str, extra: str
) -> str:
    """The error for an argument ``command`` does not take: the close match (difflib), or
    the subcommands that take it."""
    flag = extra.split("=", 1)[0]
    if not flag.startswith("--"):
        return f"{path}: unexpected argument {extra!r}"
    others = [c for c in _commands_with(flag, parser) if c != path]
    if others:
        return f"{flag} is not a flag of '{path}' (it is one of: {', '.join(sorted(others))})"
    hint = did_you_mean(flag, _flags_of(command))
    return f"unknown flag {flag}{hint if 'did you mean' in hint else ''}"


def _exit_status(exc: KinesisSpoutError) -> int:
    """2 for bad input, 3 for a job that runs (its lease held), else 1."""
    from kinesis_spout.checkpoint.joblease import JobLeaseHeldError

    if isinstance(exc, ConfigError):
        return EXIT_BAD_INPUT
    if isinstance(exc, JobLeaseHeldError) or getattr(exc, "job_running", False):
        return EXIT_RUNNING
    return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(only={w for w in words if not w.startswith("-")})
    args, extras = parser.parse_known_args(argv)
    if extras:
        parser = build_parser()  # every subcommand's flags: which ones take it
        command = getattr(args, "command_parser", parser)
        path = getattr(args, "command_path", "kinesis-spout")
        command.error(unknown_argument_error(parser, command, path, extras[0]))
    # A one-shot command's output is its report; the job's (run, demo) is its log.
    quiet = logging.INFO if args.command in LOGGING_COMMANDS else logging.WARNING
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else quiet,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # "Found credentials in environment variables." and the like
        for noisy in QUIET_LOGGERS:
            logging.getLogger(noisy).setLevel(logging.WARNING)
        # kazoo's reconnect chatter goes through the store's own logger: the error says it
        logging.getLogger("kinesis_spout.checkpoint.zookeeper.kazoo").setLevel(logging.ERROR)
    try:
        return int(args.handler(args))
    except KinesisSpoutError as exc:
        prog = f"kinesis-spout {getattr(args, 'command_path', '')}".rstrip()
        print(f"{prog}: error: {one_line(str(exc))}", file=sys.stderr)
        return _exit_status(exc)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
