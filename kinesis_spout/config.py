"""The one configuration object: :class:`SpoutConfig`.

Values come from, lowest precedence first: the defaults below, a TOML file,
the environment (``KINESIS_SPOUT_<FIELD>``), and explicit overrides (CLI
flags): :mod:`kinesis_spout.config_load` reads them. Everything is validated
when the object is built; a bad value raises
:class:`~kinesis_spout.errors.ConfigError` naming the field, the value and
what is allowed.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import math
import os
import socket
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kinesis_spout.errors import ConfigError

ENV_PREFIX = "KINESIS_SPOUT_"
MAX_RECORDS_PER_CALL = 10_000


class InitialPosition(enum.Enum):
    """Where a shard with no checkpoint starts."""

    TRIM_HORIZON = "TRIM_HORIZON"
    LATEST = "LATEST"
    AT_TIMESTAMP = "AT_TIMESTAMP"


READ_ON = ("executors", "driver")
"""Where the Spark job may read Kinesis (``read_on``)."""


def _default_owner() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class SpoutConfig:
    """Every knob of the reader, the spout, the stores and the Spark job.

    Durations are seconds (floats). Each field's doc says its range.
    """

    # --- what to read -------------------------------------------------------
    stream_name: str = "demo"
    """Kinesis stream to read."""
    job_name: str = "kinesis-spout"
    """Part of every checkpoint path: two jobs never share checkpoints."""
    region: str = "us-east-1"
    """AWS region."""
    endpoint_url: str | None = None
    """Kinesis endpoint (an emulator). Unset: boto3's own resolution, which
    honours ``AWS_ENDPOINT_URL_KINESIS`` and ``AWS_ENDPOINT_URL``."""
    initial_position: InitialPosition = InitialPosition.TRIM_HORIZON
    """Start of a shard that has no checkpoint."""
    initial_timestamp: datetime | None = None
    """Required with ``AT_TIMESTAMP`` (ISO 8601; naive means UTC)."""

    # --- reading ------------------------------------------------------------
    records_per_call: int = MAX_RECORDS_PER_CALL
    """GetRecords ``Limit``, 1..10000."""
    empty_shard_backoff: float = 1.0
    """Wait before polling a shard again after an empty answer."""
    max_calls_per_second: float = 5.0
    """GetRecords calls per second per shard (Kinesis allows 5)."""
    throttle_backoff: float = 0.5
    """First wait after a throttling or 5xx answer; doubles, with jitter."""
    throttle_backoff_max: float = 10.0
    """Cap of that wait."""
    shard_refresh_interval: float = 30.0
    """How often ListShards is called again to see resharding."""

    # --- reliability ----------------------------------------------------------
    retry_limit: int = 3
    """Extra deliveries of a failing record before it is dead-lettered (>= 0)."""
    retry_backoff: float = 0.0
    """Delay before the first retry; doubles per attempt (0 = retry at once)."""
    retry_backoff_max: float = 60.0
    """Cap of the retry delay."""
    max_in_flight: int = 10_000
    """Per shard, the most records handed out after its last *saved* checkpoint, done or
    not: a shard at the bound is not fetched (its checkpoint is saved early once half of
    the window is done). So a crash replays at most this many records per shard."""
    message_timeout: float = 30.0
    """A record not acked within this fails (Storm's message timeout); 0 = never."""
    checkpoint_interval: float = 5.0
    """Seconds between checkpoint writes (also written on close and before a shard is released)."""
    checkpoint_store: str = "file://./checkpoints"
    """``file://DIR`` (default, one worker) or ``zk://host:port[,host:port]/root``."""
    zk_auth: str | None = None
    """Optional ``user:password`` for digest ACLs on the ZooKeeper nodes."""
    zk_session_timeout: float = 10.0
    """ZooKeeper session timeout."""
    dead_letter: str = "./dead-letter"
    """Directory for dead-lettered records (JSON lines), or ``none`` to only log them."""
    worker_id: str = field(default_factory=_default_owner)
    """This worker's name in leases and checkpoints."""

    # --- the Spark job --------------------------------------------------------
    batch_size: int = 10_000
    """Most records in one micro-batch."""
    batch_max_wait: float = 1.0
    """Most seconds to wait while filling a micro-batch."""
    sink: str = "none"
    """Where processed rows also go: ``none``, ``console``, or ``parquet://DIR``."""
    max_batches: int = 0
    """Stop after this many micro-batches (0 = run until stopped)."""
    stop_when_idle: float = 0.0
    """Stop after this many seconds with nothing read and nothing in flight (0 = never)."""
    process: str | None = None
    """The Spark job's processing, ``module:function`` or ``path/file.py:function``
    (the job's ``--process`` flag wins)."""
    wait_for_lease: bool = False
    """A second driver of the same job (same job name and checkpoint store) waits for
    the running one to end instead of failing."""
    read_on: str = "executors"
    """Where the Spark job reads Kinesis: ``executors`` (one read task per shard and
    micro-batch; only statuses and failed payloads reach the driver) or ``driver``
    (the driver reads every record; faster for tiny streams and ``local[1]``)."""
    process_partitions: int = 0
    """Executor reads: spread the records read onto this many processing partitions
    (0 = process each shard's records in its read task)."""

    def __post_init__(self) -> None:
        _validate(self)

    # ------------------------------------------------------------------
    @property
    def message_timeout_or_none(self) -> float | None:
        return self.message_timeout or None

    def replace(self, **changes: Any) -> SpoutConfig:
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **coerce_values(changes))

    def as_dict(self) -> dict[str, Any]:
        """Plain values (enums by value, datetimes ISO): what ``to_toml`` writes."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, enum.Enum):
                v = v.value
            elif isinstance(v, datetime):
                v = v.isoformat()
            out[f.name] = v
        return out

    def redacted(self) -> dict[str, Any]:
        """``as_dict`` with secrets masked, for logs."""
        d = self.as_dict()
        if d.get("zk_auth"):
            d["zk_auth"] = "***"
        return d


FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SpoutConfig))
_HINTS = typing.get_type_hints(SpoutConfig)


def _field_docs() -> dict[str, str]:
    """The docstring under each field of :class:`SpoutConfig` (for ``--help``)."""
    try:
        tree = ast.parse(inspect.getsource(SpoutConfig))
    except (OSError, TypeError, SyntaxError):  # no source (frozen app): no help texts
        return {}
    docs: dict[str, str] = {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for node, nxt in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


FIELD_DOCS: dict[str, str] = _field_docs()


def _base_type(name: str) -> tuple[type, bool]:
    """(underlying type, optional?) of a field."""
    hint = _HINTS[name]
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        non_none = [a for a in args if a is not type(None)]
        return non_none[0], True
    return hint, False


def _coerce(name: str, value: Any) -> Any:
    """Turn a TOML/env/CLI value into the field's type, or raise ConfigError."""
    if name not in _HINTS:
        raise ConfigError(name, value, f"unknown key; known keys: {', '.join(FIELD_NAMES)}")
    typ, optional = _base_type(name)
    if value is None or (optional and isinstance(value, str) and value.lower() in ("", "none")):
        if optional:
            return None
        raise ConfigError(name, value, "a value is required")
    try:
        if typ is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
                return True
            if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if typ is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if typ is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if typ is str:
            if not isinstance(value, str):
                raise ValueError
            return value
        if typ is InitialPosition:
            if isinstance(value, InitialPosition):
                return value
            return InitialPosition(str(value).upper())
        if typ is datetime:
            dt = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
            return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    except (ValueError, TypeError):
        raise ConfigError(name, value, f"expected {_allowed_text(typ)}") from None
    return value  # pragma: no cover - every field type is handled above


def _allowed_text(typ: type) -> str:
    return {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "a string",
        InitialPosition: "one of " + ", ".join(p.value for p in InitialPosition),
        datetime: "an ISO 8601 timestamp such as 2026-01-31T12:00:00Z",
    }.get(typ, getattr(typ, "__name__", str(typ)))


def coerce_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Each value turned into its field's type (ConfigError naming a bad one)."""
    return {k: _coerce(k, v) for k, v in values.items()}


def is_field(name: str) -> bool:
    """True if ``name`` is a field of :class:`SpoutConfig`."""
    return name in _HINTS


def _check(cond: bool, name: str, value: Any, allowed: str) -> None:
    if not cond:
        raise ConfigError(name, value, allowed)


def _validate(c: SpoutConfig) -> None:
    _check_types(c)  # first: a dataclass does not check them
    _check_names(c)
    _check_numbers(c)
    _check_targets(c)


def _check_types(c: SpoutConfig) -> None:
    """Each field has its type (ISO strings and position names are converted)."""
    for name in FIELD_NAMES:
        value = getattr(c, name)
        typ, optional = _base_type(name)
        if value is None:
            _check(optional, name, value, "a value is required")
            continue
        if isinstance(value, str) and typ in (InitialPosition, datetime):
            # SpoutConfig(initial_position="LATEST") works like the file and the flags do.
            value = _coerce(name, value)
            object.__setattr__(c, name, value)
        ok = isinstance(value, typ) and not (typ in (int, float) and isinstance(value, bool))
        if typ is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
            object.__setattr__(c, name, value)
            ok = True
        _check(ok, name, value, f"expected {_allowed_text(typ)}")
        if typ is float:
            _check(math.isfinite(value), name, value, "a finite number")


def _check_names(c: SpoutConfig) -> None:
    """The stream, job, region, endpoint and start position."""
    _check(bool(c.stream_name.strip()), "stream_name", c.stream_name, "a non-empty stream name")
    _check(len(c.stream_name) <= 128, "stream_name", c.stream_name, "at most 128 characters")
    _check(
        bool(c.job_name) and "/" not in c.job_name and c.job_name not in (".", ".."),
        "job_name",
        c.job_name,
        "a non-empty name without '/'",
    )
    _check(bool(c.region.strip()), "region", c.region, "a region such as us-east-1")
    if c.endpoint_url is not None:
        _check(
            c.endpoint_url.startswith(("http://", "https://")),
            "endpoint_url",
            c.endpoint_url,
            "an http:// or https:// URL",
        )
    if c.initial_position is InitialPosition.AT_TIMESTAMP:
        _check(
            c.initial_timestamp is not None,
            "initial_timestamp",
            c.initial_timestamp,
            "required when initial_position is AT_TIMESTAMP",
        )


def _check_numbers(c: SpoutConfig) -> None:
    """Limits, counts and durations."""
    _check(
        1 <= c.records_per_call <= MAX_RECORDS_PER_CALL,
        "records_per_call",
        c.records_per_call,
        f"between 1 and {MAX_RECORDS_PER_CALL}",
    )
    for name in (
        "empty_shard_backoff",
        "throttle_backoff",
        "retry_backoff",
        "message_timeout",
        "stop_when_idle",
    ):
        v = getattr(c, name)
        _check(v >= 0, name, v, "a number of seconds >= 0")
    for name in (
        "throttle_backoff_max",
        "retry_backoff_max",
        "checkpoint_interval",
        "shard_refresh_interval",
        "batch_max_wait",
        "zk_session_timeout",
    ):
        v = getattr(c, name)
        _check(v > 0, name, v, "a number of seconds > 0")
    _check(
        0 < c.max_calls_per_second <= 1000,
        "max_calls_per_second",
        c.max_calls_per_second,
        "between 0 (exclusive) and 1000",
    )
    _check(c.retry_limit >= 0, "retry_limit", c.retry_limit, "an integer >= 0")
    _check(c.retry_limit <= 1000, "retry_limit", c.retry_limit, "at most 1000")
    _check(c.max_in_flight >= 1, "max_in_flight", c.max_in_flight, "an integer >= 1")
    _check(c.batch_size >= 1, "batch_size", c.batch_size, "an integer >= 1")
    _check(c.max_batches >= 0, "max_batches", c.max_batches, "an integer >= 0")
    _check(
        0 <= c.process_partitions <= 100_000,
        "process_partitions",
        c.process_partitions,
        "an integer between 0 and 100000",
    )


def _check_targets(c: SpoutConfig) -> None:
    """Where checkpoints, dead letters and rows go, and who this worker is."""
    _check(
        c.checkpoint_store.startswith(("file://", "zk://", "memory://")),
        "checkpoint_store",
        c.checkpoint_store,
        "a URL: file://DIR or zk://host:port[,host:port]/root",
    )
    if c.zk_auth is not None:
        _check(":" in c.zk_auth, "zk_auth", "***", "user:password")
    _check(bool(c.dead_letter), "dead_letter", c.dead_letter, "a directory, or 'none'")
    _check(bool(c.worker_id) and "/" not in c.worker_id, "worker_id", c.worker_id, "no '/'")
    _check(
        c.sink in ("none", "console") or c.sink.startswith("parquet://"),
        "sink",
        c.sink,
        "none, console or parquet://DIR",
    )
    _check(c.read_on in READ_ON, "read_on", c.read_on, " or ".join(READ_ON))
