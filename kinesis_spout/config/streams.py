"""The streams a job reads: ``streams = [...]``, each a name or a stream ARN, with optional
per-stream overrides.

A TOML file may list plain entries or tables; the environment
(``KINESIS_SPOUT_STREAMS``) and the command line (``--stream``, repeatable) take names
and ARNs, comma-separated::

    streams = ["orders", "arn:aws:kinesis:us-east-1:123456789012:stream/payments"]
    streams = ["orders", {stream = "clicks", initial_position = "LATEST", consumer = "efo"}]

An ARN is passed to Kinesis as ``StreamARN`` (a stream of another account is read with the
credentials configured); its region must be the config's ``region``. Checkpoints, leases
and dead letters of a stream are keyed by its *name*, so a single-stream job's layout is
the same whether it names its stream in ``stream_name`` or as the first of ``streams``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kinesis_spout.config.values import CONSUMERS, InitialPosition
from kinesis_spout.errors import ConfigError

STREAM_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")
"""A stream name as Kinesis accepts it."""
STREAM_ARN = re.compile(
    r"arn:(?P<partition>aws[a-z-]*):kinesis:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):"
    r"stream/(?P<name>[a-zA-Z0-9_.-]{1,128})"
)
"""``arn:aws:kinesis:REGION:ACCOUNT:stream/NAME``."""
_ENTRY_KEYS = ("stream", "initial_position", "initial_timestamp", "consumer")
_RULE = (
    "stream names (1..128 of a-z, A-Z, 0-9, _ . -) or stream ARNs "
    "(arn:aws:kinesis:REGION:ACCOUNT:stream/NAME)"
)


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """One entry of ``streams``: the stream, and what it sets apart from the config."""

    stream: str
    """As given: a name, or a stream ARN."""
    initial_position: InitialPosition | None = None
    """Start of this stream's shards with no checkpoint (None: the config's)."""
    initial_timestamp: datetime | None = None
    """With ``AT_TIMESTAMP`` (None: the config's)."""
    consumer: str | None = None
    """``polling`` or ``efo`` for this stream (None: the config's)."""

    def __post_init__(self) -> None:
        if not (STREAM_NAME.fullmatch(self.stream) or STREAM_ARN.fullmatch(self.stream)):
            raise ConfigError("streams", self.stream, _RULE)
        if self.consumer is not None and self.consumer not in CONSUMERS:
            raise ConfigError(
                f"streams[{self.stream}].consumer", self.consumer, " or ".join(CONSUMERS)
            )

    @property
    def name(self) -> str:
        """The stream's name (of an ARN, its last part): what its checkpoints are keyed by."""
        m = STREAM_ARN.fullmatch(self.stream)
        return m.group("name") if m else self.stream

    @property
    def arn(self) -> str | None:
        """The ARN, if the entry is one."""
        return self.stream if STREAM_ARN.fullmatch(self.stream) else None

    @property
    def arn_region(self) -> str | None:
        m = STREAM_ARN.fullmatch(self.stream)
        return m.group("region") if m else None

    def as_value(self) -> str | dict[str, str]:
        """The entry as a config file writes it: the bare stream, or a table."""
        extra: dict[str, str] = {}
        if self.initial_position is not None:
            extra["initial_position"] = self.initial_position.value
        if self.initial_timestamp is not None:
            extra["initial_timestamp"] = self.initial_timestamp.isoformat()
        if self.consumer is not None:
            extra["consumer"] = self.consumer
        return {"stream": self.stream, **extra} if extra else self.stream


def parse_streams(value: Any) -> tuple[StreamSpec, ...]:
    """``streams`` as given by a file, the environment, a flag or the constructor: a
    comma-separated string, or a list of names, ARNs, tables and :class:`StreamSpec`.
    Raises :class:`ConfigError` naming a bad entry."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        raise ConfigError("streams", value, f"a list of {_RULE}")
    entries: list[Any] = []
    for v in value:  # "a,b" inside a list too: --stream a,b --stream c
        if isinstance(v, str):
            entries.extend(p.strip() for p in v.split(",") if p.strip())
        else:
            entries.append(v)
    return tuple(_entry(v) for v in entries)


def _entry(v: Any) -> StreamSpec:
    if isinstance(v, StreamSpec):
        return v
    if isinstance(v, str):
        return StreamSpec(v.strip())
    if not isinstance(v, Mapping):
        raise ConfigError("streams", v, f"{_RULE}, or tables with a 'stream' key")
    unknown = sorted(set(v) - set(_ENTRY_KEYS))
    stream = v.get("stream")
    if not isinstance(stream, str):
        raise ConfigError("streams", dict(v), "a table with a 'stream' key (a name or an ARN)")
    where = f"streams[{stream}]"
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]}", v[unknown[0]], f"one of {', '.join(_ENTRY_KEYS)}"
        )
    position = v.get("initial_position")
    if position is not None:
        try:
            position = InitialPosition(str(position).upper())
        except ValueError:
            allowed = ", ".join(p.value for p in InitialPosition)
            raise ConfigError(f"{where}.initial_position", position, allowed) from None
    stamp = v.get("initial_timestamp")
    if stamp is not None and not isinstance(stamp, datetime):
        try:
            stamp = datetime.fromisoformat(str(stamp))
        except ValueError:
            raise ConfigError(f"{where}.initial_timestamp", stamp, "an ISO 8601 time") from None
    if stamp is not None and stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return StreamSpec(stream.strip(), position, stamp, v.get("consumer"))


def check_streams(streams: tuple[StreamSpec, ...], region: str) -> None:
    """No stream twice (by name: two ARNs of one name would share checkpoints); every ARN
    in ``region``."""
    seen: dict[str, str] = {}
    for s in streams:
        if s.name in seen:
            raise ConfigError(
                "streams",
                s.stream,
                f"each stream once; {s.name!r} is also given as {seen[s.name]!r}",
            )
        seen[s.name] = s.stream
        if s.arn_region is not None and s.arn_region != region:
            raise ConfigError(
                "streams",
                s.stream,
                f"an ARN in the config's region {region!r} (it names {s.arn_region!r}); "
                "set region, or read that stream from a job of its region",
            )
