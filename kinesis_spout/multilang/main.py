"""``python -m kinesis_spout.multilang``: the Kinesis spout as a Storm ShellSpout child.

Settings, lowest precedence first:

1. ``SpoutConfig`` defaults, the ``--config`` TOML file, ``KINESIS_SPOUT_*``
   environment variables (as everywhere in the project);
2. the Storm conf from the handshake: ``topology.message.timeout.secs`` (see
   :func:`message_timeout_from_storm`), ``kinesis.spout.<field>`` for any
   ``SpoutConfig`` field and ``kinesis.spout.multilang.<option>`` for the
   adapter's :class:`~kinesis_spout.multilang.adapter.MultilangOptions`;
3. command-line flags.

Only protocol messages go to stdout: the real stdout is taken for the
protocol before anything else runs, and file descriptor 1 and ``sys.stdout``
then point at stderr, so a stray ``print`` (ours, a library's, a child
process's) cannot corrupt the conversation.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import IO, Any

from kinesis_spout.config import FIELD_NAMES, SpoutConfig
from kinesis_spout.config.load import add_config_arguments, load_config
from kinesis_spout.errors import ConfigError
from kinesis_spout.multilang.adapter import (
    DATA_ENCODINGS,
    LOG_LEVELS,
    MultilangOptions,
    ShellSpoutAdapter,
    SpoutLike,
    StormContext,
    StormLogHandler,
)
from kinesis_spout.multilang.protocol import MessageReader, MessageWriter

log = logging.getLogger(__name__)

STORM_PREFIX = "kinesis.spout."
MULTILANG_PREFIX = "kinesis.spout.multilang."
MESSAGE_TIMEOUT_KEY = "topology.message.timeout.secs"
MAX_PENDING_KEY = "topology.max.spout.pending"
MESSAGE_TIMEOUT_GRACE = 5.0
"""Seconds added to twice Storm's timeout for the spout's own timer."""

_STREAM_KEYS = ("stream_name", "streams")

_OPTION_FLAGS = {
    "output_stream": "--output-stream",
    "need_task_ids": "--need-task-ids",
    "data_encoding": "--data-encoding",
    "emits_per_next": "--emits-per-next",
    "idle_sleep": "--idle-sleep",
    "log_level": "--log-level",
    "include_stream_name": "--include-stream-name",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kinesis_spout.multilang",
        description="Run the Kinesis spout as a Storm ShellSpout child (multilang protocol on "
        "stdin/stdout; logs on stderr and as Storm log messages).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="DEBUG logging on stderr")
    add_config_arguments(parser)
    group = parser.add_argument_group("multilang (override kinesis.spout.multilang.* in the conf)")
    group.add_argument("--output-stream", dest="ml_output_stream", metavar="STREAM")
    group.add_argument(
        "--need-task-ids",
        dest="ml_need_task_ids",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ask Storm for task ids after each emit (Storm's default: yes)",
    )
    group.add_argument("--data-encoding", dest="ml_data_encoding", choices=DATA_ENCODINGS)
    group.add_argument("--emits-per-next", dest="ml_emits_per_next", metavar="N")
    group.add_argument("--idle-sleep", dest="ml_idle_sleep", metavar="SECONDS")
    group.add_argument("--log-level", dest="ml_log_level", choices=LOG_LEVELS)
    group.add_argument(
        "--include-stream-name",
        dest="ml_include_stream_name",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="append the record's stream name to each tuple as a last field, stream_name "
        "(default: no, the tuple layout stays as declared)",
    )
    return parser


def storm_settings(conf: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(spout config values, multilang option values)`` named in the Storm conf.

    An unknown ``kinesis.spout.*`` key is an error: a typo must not be ignored.
    """
    spout_values: dict[str, Any] = {}
    option_values: dict[str, Any] = {}
    for key, value in conf.items():
        if key.startswith(MULTILANG_PREFIX):
            option_values[key[len(MULTILANG_PREFIX) :]] = value
        elif key.startswith(STORM_PREFIX):
            name = key[len(STORM_PREFIX) :]
            if name not in FIELD_NAMES:
                raise ConfigError(
                    key,
                    value,
                    f"unknown key in the Storm conf; known: {STORM_PREFIX}<"
                    + "|".join(FIELD_NAMES)
                    + f">, {MULTILANG_PREFIX}<"
                    + "|".join(_OPTION_FLAGS)
                    + ">",
                )
            spout_values[name] = value
    return spout_values, option_values


def message_timeout_from_storm(conf: Mapping[str, Any]) -> float | None:
    """The spout's own message timeout for Storm's ``topology.message.timeout.secs``.

    Storm's acker times a tuple out between T and 2T (its pending map rotates
    every T), then sends ``fail``. The spout's timer is only a safety net, so
    it is set to 2T + 5 s: Storm's fail always comes first, and a retry is
    never failed by the late timeout of the delivery before it.
    """
    value = conf.get(MESSAGE_TIMEOUT_KEY)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(MESSAGE_TIMEOUT_KEY, value, "a number of seconds > 0")
    return 2 * float(value) + MESSAGE_TIMEOUT_GRACE


def resolve_settings(
    args: argparse.Namespace, storm: StormContext, env: Mapping[str, str] | None = None
) -> tuple[SpoutConfig, MultilangOptions]:
    """The spout config and adapter options for this Storm task (see module docstring)."""
    spout_values, option_values = storm_settings(storm.conf)
    cli_spout = {
        name: getattr(args, "cfg_" + name)
        for name in FIELD_NAMES
        if getattr(args, "cfg_" + name, None) is not None
    }
    if "message_timeout" not in spout_values and "message_timeout" not in cli_spout:
        timeout = message_timeout_from_storm(storm.conf)
        if timeout is not None:
            spout_values["message_timeout"] = timeout
    if any(k in cli_spout for k in _STREAM_KEYS):  # a flag naming streams replaces the conf's
        spout_values = {k: v for k, v in spout_values.items() if k not in _STREAM_KEYS}
    config = load_config(getattr(args, "config", None), env=env, overrides=spout_values | cli_spout)

    cli_options = {
        name: getattr(args, "ml_" + name)
        for name in _OPTION_FLAGS
        if getattr(args, "ml_" + name, None) is not None
    }
    merged = option_values | cli_options
    options = MultilangOptions.from_values(merged)
    pending = storm.conf.get(MAX_PENDING_KEY)
    if (
        "emits_per_next" not in merged
        and isinstance(pending, int)
        and not isinstance(pending, bool)
        and pending > 0
    ):
        options = options.replace(emits_per_next=min(options.emits_per_next, pending))
    return config, options


def make_spout(config: SpoutConfig, storm: StormContext) -> SpoutLike:
    """The spout for this task, of every stream of the config: a plain
    :class:`~kinesis_spout.spout.KinesisSpout` when the component runs as one Storm task,
    else one that shares the shards with the other tasks through ZooKeeper leases
    (:mod:`kinesis_spout.multilang.coordinated`)."""
    from kinesis_spout.multilang.coordinated import (
        CoordinatedSpout,
        require_shared_store,
        storm_parallelism,
    )

    parallelism = storm_parallelism(storm.context)
    require_shared_store(config, parallelism, storm.component_id)
    if parallelism > 1:
        log.info(
            "%d tasks share the shards of %s through ZooKeeper leases",
            parallelism,
            ", ".join(config.stream_names),
        )
        return CoordinatedSpout(config)
    from kinesis_spout.spout import KinesisSpout

    return KinesisSpout(config)


def _claim_stdout() -> IO[bytes]:
    """The real stdout for protocol bytes; fd 1 and ``sys.stdout`` become stderr."""
    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(protocol_fd, "wb")


def _setup_logging(storm_handler: StormLogHandler, verbose: bool) -> None:
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(logging.DEBUG if verbose else logging.WARNING)
    stderr.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)s [pid {os.getpid()}] %(name)s: %(message)s")
    )
    root.addHandler(stderr)
    root.addHandler(storm_handler)
    for noisy in ("botocore", "boto3", "urllib3", "kazoo"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    protocol_out = _claim_stdout()
    protocol_in = sys.stdin.buffer
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    args = build_parser().parse_args(argv)
    storm_handler = StormLogHandler()
    _setup_logging(storm_handler, args.verbose)

    def configure(storm: StormContext) -> tuple[SpoutLike, MultilangOptions]:
        config, options = resolve_settings(args, storm)
        log.info("config: %s", config.redacted())
        return make_spout(config, storm), options

    adapter = ShellSpoutAdapter(
        MessageReader(protocol_in),
        MessageWriter(protocol_out),
        configure,
        log_handler=storm_handler,
    )

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        adapter.request_stop()

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return adapter.run()
    finally:
        with contextlib.suppress(OSError, ValueError):
            protocol_out.close()
