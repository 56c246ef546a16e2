"""Where a :class:`~kinesis_spout.config.SpoutConfig` comes from: a TOML file,
the environment (``KINESIS_SPOUT_<FIELD>``) and command-line flags (which win).

A TOML file may be flat or grouped in tables; table names are ignored and
only the keys count, so these are equivalent::

    stream_name = "orders"          [stream]
    retry_limit = 5                 stream_name = "orders"
                                    [retry]
                                    retry_limit = 5
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kinesis_spout.config import (
    ENV_PREFIX,
    FIELD_DOCS,
    FIELD_NAMES,
    SpoutConfig,
    coerce_values,
    is_field,
)
from kinesis_spout.errors import ConfigError


def _flatten(doc: Mapping[str, Any], path: str, out: dict[str, Any]) -> None:
    for k, v in doc.items():
        if isinstance(v, dict):
            _flatten(v, f"{path}{k}.", out)
        else:
            if k in out:
                raise ConfigError(k, v, f"given twice in the file (also as {out[k]!r})")
            out[k] = v


def read_toml(path: str | Path) -> dict[str, Any]:
    """The keys of a TOML config file (tables flattened), unvalidated."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("config", str(p), f"a readable TOML file ({exc.strerror})") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("config", str(p), f"valid TOML ({exc})") from None
    out: dict[str, Any] = {}
    _flatten(doc, "", out)
    for k in out:
        if not is_field(k):
            raise ConfigError(
                k, out[k], f"unknown key in {p}; known keys: {', '.join(FIELD_NAMES)}"
            )
    return out


# KINESIS_SPOUT_CONFIG names the file; the others are read by scripts/ and kinesis_spout.testing.
_TOOLING_ENV = frozenset({"config", "venv", "node_modules"})


def env_values(env: Mapping[str, str]) -> dict[str, Any]:
    """``KINESIS_SPOUT_<FIELD>`` variables (unknown ones are an error: a typo
    must not be silently ignored)."""
    out: dict[str, Any] = {}
    for k, v in env.items():
        if not k.startswith(ENV_PREFIX):
            continue
        name = k[len(ENV_PREFIX) :].lower()
        if name in _TOOLING_ENV:  # the config file itself, and the project's scripts' settings
            continue
        if not is_field(name):
            raise ConfigError(
                k, v, f"unknown variable; known: {ENV_PREFIX}<{'|'.join(FIELD_NAMES)}>"
            )
        out[name] = v
    return out


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> SpoutConfig:
    """Build the config from file, environment and overrides (CLI wins)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    if path is None and env.get(ENV_PREFIX + "CONFIG"):
        path = env[ENV_PREFIX + "CONFIG"]
    if path is not None:
        values.update(read_toml(path))
    values.update(env_values(env))
    if overrides:
        values.update({k: v for k, v in overrides.items() if v is not None})
    return SpoutConfig(**coerce_values(values))


# Fields whose flag the commands define themselves (with their own help text).
_OWN_FLAG_FIELDS = frozenset({"process", "wait_for_lease"})


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config FILE`` and one ``--<field>`` flag per config field."""
    parser.add_argument("--config", metavar="FILE", help="TOML config file")
    group = parser.add_argument_group("config (override the file and the environment)")
    for f in dataclasses.fields(SpoutConfig):
        if f.name in _OWN_FLAG_FIELDS:
            continue
        doc = FIELD_DOCS.get(f.name, "")
        group.add_argument(
            "--" + f.name.replace("_", "-"),
            dest="cfg_" + f.name,
            metavar=f.name.upper(),
            default=None,
            help=doc or None,
        )
    group.add_argument(
        "--wait-for-lease",
        dest="cfg_wait_for_lease",
        nargs="?",
        const="true",
        default=None,
        metavar="BOOL",
        help="if another driver of this job runs, wait for it to end instead of failing",
    )


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> SpoutConfig:
    """The config given by a namespace parsed with :func:`add_config_arguments`."""
    overrides = {
        name: getattr(args, "cfg_" + name)
        for name in FIELD_NAMES
        if getattr(args, "cfg_" + name, None) is not None
    }
    return load_config(getattr(args, "config", None), env=env, overrides=overrides)


def to_toml(config: SpoutConfig, keys: Sequence[str] | None = None) -> str:
    """Serialise (a subset of) the config as flat TOML."""
    lines = []
    for k, v in config.as_dict().items():
        if keys is not None and k not in keys:
            continue
        if v is None:
            continue
        if isinstance(v, bool):
            lines.append(f"{k} = {'true' if v else 'false'}")
        elif isinstance(v, int | float):
            lines.append(f"{k} = {v!r}")
        else:
            escaped = str(v).replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'{k} = "{escaped}"')
    return "\n".join(lines) + "\n"
