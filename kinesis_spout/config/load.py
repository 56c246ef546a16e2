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
import difflib
import os
import re
import tomllib
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from kinesis_spout.config.fielddocs import FIELD_DOCS
from kinesis_spout.config.model import (
    FIELD_NAMES,
    SpoutConfig,
    coerce_values,
    is_field,
)
from kinesis_spout.config.values import ENV_PREFIX
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
            raise ConfigError(k, out[k], f"unknown key in {p}{did_you_mean(k, FIELD_NAMES)}")
    return out


def did_you_mean(word: str, choices: Collection[str], prefix: str = "") -> str:
    """``"; did you mean X?"`` for the closest of ``choices`` (difflib; of equally close
    ones, the one that shares the longest start with ``word``), else the whole list."""
    close = difflib.get_close_matches(word, sorted(choices), n=5, cutoff=0.6)
    if close:
        best = difflib.SequenceMatcher(None, word, close[0]).ratio()
        ties = [c for c in close if difflib.SequenceMatcher(None, word, c).ratio() == best]
        return f"; did you mean {prefix}{max(ties, key=lambda c: _shared_start(word, c))}?"
    return f"; known: {', '.join(prefix + c for c in sorted(choices))}"


def _shared_start(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


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
                k,
                v,
                "unknown variable"
                + did_you_mean(name.upper(), [n.upper() for n in FIELD_NAMES], ENV_PREFIX),
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
        _apply(values, read_toml(path))
    _apply(values, env_values(env))
    if overrides:
        _apply(values, {k: v for k, v in overrides.items() if v is not None})
    return SpoutConfig(**coerce_values(values))


_STREAM_KEYS = ("stream_name", "streams")


def _apply(values: dict[str, Any], layer: Mapping[str, Any]) -> None:
    """``layer``'s values over ``values``; a layer that names a stream (``stream_name`` or
    ``streams``) replaces both keys of the layers below: ``--stream payments`` reads
    ``payments`` whatever the file's ``stream_name`` and ``streams`` say."""
    if any(k in layer for k in _STREAM_KEYS):
        for k in _STREAM_KEYS:
            values.pop(k, None)
    values.update(layer)


# Fields whose flag the commands define themselves (with their own help text).
_OWN_FLAG_FIELDS = frozenset({"process"})

STORE_FIELDS = ("job_name", "stream_name", "checkpoint_store", "zk_auth", "zk_session_timeout")
"""The fields a command that reads the checkpoint store uses."""
AWS_FIELDS = ("region", "profile", "endpoint_url")
"""The fields a command that calls Kinesis uses."""

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def plain_text(doc: str) -> str:
    """An RST field doc as ``--help`` shows it: no ``literal`` quotes, no roles."""
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1], doc)
    return text.replace("``", "").replace("%", "%%")


_DEFAULTS_SAID = {
    "region": "AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1",
    "profile": "AWS_PROFILE, else the default chain",
    "endpoint_url": "AWS_ENDPOINT_URL_KINESIS, AWS_ENDPOINT_URL, AWS",
    "worker_id": "<host>-<pid>",
}


def _default_text(f: dataclasses.Field[Any]) -> str:
    if f.name in _DEFAULTS_SAID:
        return f" (default: {_DEFAULTS_SAID[f.name]})"
    value = f.default
    if value is None or value is dataclasses.MISSING:
        return ""
    if isinstance(value, bool):
        value = str(value).lower()
    return f" (default: {getattr(value, 'value', value)})"


def add_config_arguments(
    parser: argparse.ArgumentParser,
    fields: Collection[str] | None = None,
    *,
    nested: bool = False,
) -> None:
    """Add ``--config FILE`` and one ``--<field-with-dashes>`` flag per config field
    (only those in ``fields``, when given: then each help is the doc's first sentence).
    ``nested``: the parser is a subcommand of a parser with the same flags (an absent
    flag leaves the outer one's value alone)."""
    absent = argparse.SUPPRESS if nested else None
    parser.add_argument("--config", metavar="FILE", default=absent, help="TOML config file")
    group = parser.add_argument_group("config (override the file and the environment)")
    for f in dataclasses.fields(SpoutConfig):
        if f.name in _OWN_FLAG_FIELDS or (fields is not None and f.name not in fields):
            continue
        doc = plain_text(FIELD_DOCS.get(f.name, ""))
        if fields is not None:
            doc = doc.split(". ", 1)[0].rstrip(".")
        if f.name == "streams":  # --stream A --stream B (or --stream A,B)
            names = ("--stream",) if fields is not None else ("--stream", "--streams")
            group.add_argument(
                *names,
                dest="cfg_streams",
                metavar="NAME|ARN",
                action="append",
                default=absent,
                help=(
                    doc + " (--stream once per stream)"
                    if fields is None
                    else "this stream only (repeatable; default: all)"
                ),
            )
            continue
        doc += _default_text(f)
        group.add_argument(
            "--" + f.name.replace("_", "-"),
            dest="cfg_" + f.name,
            metavar=_metavar(f.name),
            default=absent,
            help=doc or None,
            **_bool_flag(f.type),
        )


_METAVARS = {
    "bool": "BOOL",
    "float": "SECONDS",
    "int": "N",
    "InitialPosition": "POSITION",
    "datetime": "TIME",
    "str": "VALUE",
}
_NAMED = {
    "stream_name": "NAME",
    "job_name": "NAME",
    "checkpoint_store": "URL",
    "endpoint_url": "URL",
    "dead_letter": "TARGET",
    "max_calls_per_second": "N",
}


def _bool_flag(typ: object) -> dict[str, Any]:
    """A bool flag alone means true: ``--wait-for-lease``."""
    return {"nargs": "?", "const": "true"} if typ in (bool, "bool") else {}


def _metavar(name: str) -> str:
    """``--zk-session-timeout SECONDS``: the field's kind, or a word for it."""
    typ = str(SpoutConfig.__annotations__.get(name, "")).split(" | ")[0]
    return _NAMED.get(name) or _METAVARS.get(typ, "VALUE")


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> SpoutConfig:
    """The config given by a namespace parsed with :func:`add_config_arguments`."""
    overrides = {
        name: getattr(args, "cfg_" + name)
        for name in FIELD_NAMES
        if getattr(args, "cfg_" + name, None) is not None
    }
    return load_config(getattr(args, "config", None), env=env, overrides=overrides)


def _toml_value(v: str | Mapping[str, str]) -> str:
    """A string, or an inline table of strings, as TOML writes them."""
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"


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
        elif isinstance(v, list):
            if v:
                lines.append(f"{k} = [{', '.join(_toml_value(e) for e in v)}]")
        elif isinstance(v, int | float):
            lines.append(f"{k} = {v!r}")
        else:
            escaped = str(v).replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'{k} = "{escaped}"')
    return "\n".join(lines) + "\n"
