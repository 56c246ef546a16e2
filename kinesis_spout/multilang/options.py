"""Settings of the multilang adapter, the handshake's Storm context and the exit codes."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from kinesis_spout.errors import ConfigError

DATA_ENCODINGS = ("auto", "base64")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class ExitCode(enum.IntEnum):
    """Exit status of ``python -m kinesis_spout.multilang``."""

    OK = 0
    """End of input, or SIGTERM: the spout was checkpointed and closed."""
    FAILED = 1
    """The spout failed (unknown stream, unreachable endpoint, store refused...)."""
    BAD_INPUT = 2
    """The parent broke the protocol, or the configuration is invalid."""


@dataclass(frozen=True, slots=True)
class MultilangOptions:
    """Settings of the adapter itself (the spout's are in ``SpoutConfig``).

    Set in the Storm conf as ``kinesis.spout.multilang.<name>`` or with the
    command's flags (flags win).
    """

    output_stream: str = "default"
    """Storm stream id of every emit."""
    need_task_ids: bool = True
    """Ask Storm for the task ids of each emit (Storm's default). ``False``
    saves a round trip per record."""
    data_encoding: str = "auto"
    """``auto``: data as text when it is valid UTF-8, else base64 (the
    ``encoding`` field says which); ``base64``: always base64."""
    emits_per_next: int = 100
    """Most records emitted in reply to one ``next`` (1..10000); capped by
    ``topology.max.spout.pending`` when that is set."""
    idle_sleep: float = 0.05
    """Longest sleep before the ``sync`` of a ``next`` that found nothing
    (0..1 s); the spout's own ``poll_delay()`` is used when shorter."""
    log_level: str = "INFO"
    """Lowest level of log records sent to Storm as ``log`` messages."""
    include_stream_name: bool = False
    """Append the record's stream name to each tuple as a last field, ``stream_name``
    (off: the tuple layout of a topology declared before stays as it was)."""

    def __post_init__(self) -> None:
        def check(ok: bool, name: str, value: Any, allowed: str) -> None:
            if not ok:
                raise ConfigError(f"multilang.{name}", value, allowed)

        check(
            isinstance(self.output_stream, str) and bool(self.output_stream),
            "output_stream",
            self.output_stream,
            "a non-empty Storm stream id",
        )
        for name in ("need_task_ids", "include_stream_name"):
            check(isinstance(getattr(self, name), bool), name, getattr(self, name), "a bool")
        check(
            self.data_encoding in DATA_ENCODINGS,
            "data_encoding",
            self.data_encoding,
            "one of " + ", ".join(DATA_ENCODINGS),
        )
        check(
            isinstance(self.emits_per_next, int)
            and not isinstance(self.emits_per_next, bool)
            and 1 <= self.emits_per_next <= 10_000,
            "emits_per_next",
            self.emits_per_next,
            "an integer between 1 and 10000",
        )
        check(
            isinstance(self.idle_sleep, int | float)
            and not isinstance(self.idle_sleep, bool)
            and 0 <= self.idle_sleep <= 1,
            "idle_sleep",
            self.idle_sleep,
            "a number of seconds between 0 and 1",
        )
        check(
            self.log_level in LOG_LEVELS,
            "log_level",
            self.log_level,
            "one of " + ", ".join(LOG_LEVELS),
        )

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> MultilangOptions:
        """Options from loosely typed values (CLI strings, Storm conf JSON)."""
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for name, value in values.items():
            if name not in known:
                raise ConfigError(
                    f"multilang.{name}", value, "unknown option; known: " + ", ".join(known)
                )
            kwargs[name] = _coerce_option(name, value, type(getattr(cls(), name)))
        return cls(**kwargs)

    def replace(self, **changes: Any) -> MultilangOptions:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return MultilangOptions(**values)


def _coerce_option(name: str, value: Any, typ: type) -> Any:
    if not isinstance(value, str):
        if typ is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value  # validated by __post_init__
    text = value.strip()
    try:
        if typ is bool:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if typ is int:
            return int(text)
        if typ is float:
            return float(text)
    except ValueError:
        raise ConfigError(f"multilang.{name}", value, f"expected {typ.__name__}") from None
    return text.upper() if name == "log_level" else text


@dataclass(frozen=True, slots=True)
class StormContext:
    """What Storm sent in the handshake."""

    conf: dict[str, Any]
    """The topology configuration."""
    pid_dir: str
    """Where the pid file was created."""
    context: dict[str, Any] = field(default_factory=dict)
    """The topology context (task ids, component id, streams...)."""

    @property
    def task_id(self) -> int | None:
        tid = self.context.get("taskid")
        return tid if isinstance(tid, int) else None

    @property
    def component_id(self) -> str | None:
        cid = self.context.get("componentid")
        return cid if isinstance(cid, str) else None
