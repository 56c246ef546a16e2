"""The one configuration object: :class:`SpoutConfig`.

Values come from, lowest precedence first: the defaults below, a TOML file,
the environment (``KINESIS_SPOUT_<FIELD>``), and explicit overrides (CLI
flags): :mod:`kinesis_spout.config.load` reads them. Everything is validated
when the object is built; a bad value raises
:class:`~kinesis_spout.errors.ConfigError` naming the field, the value and
what is allowed.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import socket
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kinesis_spout.aws import AssumedRole
from kinesis_spout.config.checks import check as _check
from kinesis_spout.config.checks import (
    check_consumer,
    check_executor_reads,
    check_names,
    check_numbers,
    check_targets,
)
from kinesis_spout.config.coerce import allowed_text, to_type
from kinesis_spout.config.role import check_role, default_session_name
from kinesis_spout.config.streams import StreamSpec, check_streams, parse_streams
from kinesis_spout.config.values import MAX_RECORDS_PER_CALL, InitialPosition
from kinesis_spout.errors import ConfigError

__all__ = [
    "FIELD_NAMES",
    "SpoutConfig",
    "coerce_values",
    "is_field",
]


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
    streams: tuple[StreamSpec, ...] = ()
    """Several streams read by one job. Names or stream ARNs
    (``arn:aws:kinesis:REGION:ACCOUNT:stream/NAME``), comma-separated in the environment,
    ``--stream`` once per stream on the command line; in a file, an entry may be a table
    that sets the stream's own ``initial_position``, ``initial_timestamp`` or
    ``consumer``. Empty: ``stream_name`` alone; given, ``stream_name`` is their first."""
    job_name: str = "kinesis-spout"
    """Part of every checkpoint path: two jobs never share checkpoints."""
    region: str = ""
    """AWS region. Unset (empty): ``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile's
    region, else us-east-1, as boto3 and the AWS CLI resolve it (when the config is built)."""
    profile: str | None = None
    """AWS profile (``~/.aws/config``) of every boto3 client. Unset: ``AWS_PROFILE``,
    else the default credentials chain, as the AWS CLI does."""
    role_arn: str | None = None
    """An IAM role every AWS client assumes (``arn:aws:iam::ACCOUNT:role/NAME``). On the
    driver and the executors, with the credentials ``profile`` gives, refreshed before they
    expire; another account's stream: that account's role and the stream's ARN."""
    role_session_name: str | None = None
    """The assumed role's session name. CloudTrail shows it; unset:
    ``kinesis-spout-<job_name>``."""
    external_id: str | None = None
    """The external ID of the role's trust policy. Only with ``role_arn``."""
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
    empty_shard_backoff_max: float = 5.0
    """A shard that stays empty waits twice as long after each further empty answer, up to
    this (its first new record waits at most this long); = ``empty_shard_backoff``: a fixed
    wait."""
    max_calls_per_second: float = 5.0
    """GetRecords calls per second per shard (Kinesis allows 5)."""
    throttle_backoff: float = 0.5
    """First wait after a throttling or 5xx answer; doubles, with jitter."""
    throttle_backoff_max: float = 10.0
    """Cap of that wait."""
    shard_refresh_interval: float = 30.0
    """How often ListShards is called again to see resharding."""
    consumer: str = "polling"
    """How shards are read: ``polling`` (GetRecords; a shard's 2 MB/s and 5 calls/s are
    shared by every consumer) or ``efo`` (enhanced fan-out: SubscribeToShard pushes
    2 MB/s per shard to this consumer alone)."""
    consumer_name: str | None = None
    """The enhanced fan-out consumer (default: ``job_name``); registered if absent."""
    deregister_on_close: bool = False
    """Deregister that consumer when the reader closes (it costs money while registered)."""
    subscription_renewal: float = 280.0
    """Seconds after which a subscription is renewed from its last position (Kinesis
    ends each after 300)."""

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
    """``file://DIR`` (default, one host), ``zk://host:port[,host:port]/root`` or
    ``dynamodb://TABLE``."""
    zk_auth: str | None = None
    """Optional ``user:password`` for digest ACLs on the ZooKeeper nodes."""
    zk_session_timeout: float = 10.0
    """ZooKeeper session timeout."""
    dead_letter: str = "./dead-letter"
    """Where given-up records go: a directory (JSON lines), ``s3://bucket/prefix`` (JSON
    lines objects; honours ``AWS_ENDPOINT_URL_S3``), or ``none`` to only log them."""
    dead_letter_on: str = "exhausted,expired"
    """Which given-up records are written to ``dead_letter`` (comma-separated, or a TOML
    list): ``exhausted`` (retries ran out), ``expired`` (older than ``max_record_age``);
    the others are only logged."""
    max_record_age: float | None = None
    """Seconds: a failed record that arrived longer ago than this is given up as
    ``expired`` instead of retried (unset = never)."""
    fast_retries: bool = True
    """Retry a failed record at once, in the same micro-batch (the Spark job), when its
    retry delay is at most ``fast_retry_max_delay``; otherwise at a later batch."""
    fast_retry_max_delay: float = 0.5
    """The longest retry delay a fast retry waits out inside a batch."""
    worker_id: str = field(default_factory=_default_owner)
    """This worker's name in leases and checkpoints."""

    # --- the Spark job --------------------------------------------------------
    batch_size: int = 10_000
    """Most records in one micro-batch (executor reads: read from each shard)."""
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
    """A second reader of the same job (same job name and checkpoint store: the Spark
    job's driver, a ``KinesisSpout``) waits for the running one to end instead of failing."""
    read_on: str = "executors"
    """Where the Spark job reads Kinesis: ``executors``, the only value (one Spark job per
    micro-batch, its shards grouped into read tasks; only statuses and failed payloads
    reach the driver). Kept so that a config of an earlier release naming ``driver`` gets
    an error that says so."""
    shards_per_task: int = 0
    """Executor reads: shards read by one Spark task of a micro-batch (0 = spread the
    shards over the cluster's cores: one task per core, ``defaultParallelism``); with
    ``consumer = "efo"`` each shard is a task of its own."""
    poll_threads: int = 8
    """Executor reads: GetRecords calls a read task keeps in flight at once, one per shard
    at most (1 = its shards are polled one after the other)."""
    process_partitions: int = 0
    """Executor reads: spread the records read onto this many processing partitions
    (0 = process each shard's records in its read task)."""
    task_timeout: float = 300.0
    """Executor reads: a read or retry task still running this many seconds after it
    started is given up (a function that hangs): its Spark job is cancelled, a retry
    task's records fail, a read task's shard is read again; 0 = never."""

    # --- observability ----------------------------------------------------------
    metrics_port: int | None = None
    """Serve Prometheus metrics on this port at ``/metrics`` (the Spark job's driver, the
    spout, the multilang process); unset = off, 0 = any free port (logged). Needs the
    ``metrics`` extra (prometheus_client)."""
    metrics_host: str = "127.0.0.1"
    """Address the metrics endpoint listens on (``0.0.0.0``: every interface)."""

    def __post_init__(self) -> None:
        _validate(self)

    # ------------------------------------------------------------------
    @property
    def dead_letter_reasons(self) -> frozenset[str]:
        """``dead_letter_on`` as a set of reasons."""
        return frozenset(r.strip() for r in self.dead_letter_on.split(",") if r.strip())

    @property
    def stream_arn(self) -> str | None:
        """The stream's ARN, when this config reads one stream given as an ARN."""
        if len(self.streams) == 1 and self.streams[0].name == self.stream_name:
            return self.streams[0].arn
        return None

    @property
    def stream_names(self) -> tuple[str, ...]:
        """The names of the streams read: ``streams``', else ``stream_name``."""
        return tuple(s.name for s in self.streams) or (self.stream_name,)

    def per_stream(self) -> list[SpoutConfig]:
        """One config per stream read (its own overrides applied, ``streams`` its own entry
        alone): what each stream's reader is built from. One stream: ``[self]``."""
        if len(self.streams) <= 1:
            return [self]
        out = []
        for s in self.streams:
            changes: dict[str, Any] = {"stream_name": s.name, "streams": (s,)}
            if s.initial_position is not None:
                changes["initial_position"] = s.initial_position
            if s.initial_timestamp is not None:
                changes["initial_timestamp"] = s.initial_timestamp
            if s.consumer is not None:
                changes["consumer"] = s.consumer
            out.append(dataclasses.replace(self, **changes))
        return out

    @property
    def assumed_role(self) -> AssumedRole | None:
        """The role every client assumes (``role_arn``), or None."""
        if self.role_arn is None:
            return None
        name = self.role_session_name or default_session_name(self.job_name)
        return AssumedRole(self.role_arn, name, self.external_id, self.region)

    @property
    def efo_consumer_name(self) -> str:
        """The enhanced fan-out consumer's name: ``consumer_name``, else ``job_name``."""
        return self.consumer_name or self.job_name

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
            if f.name == "streams":
                v = [spec.as_value() for spec in v]
            elif isinstance(v, enum.Enum):
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
LIST_FIELDS = frozenset({"dead_letter_on"})
"""String fields that also take a TOML list (joined with commas)."""
_HINTS = typing.get_type_hints(SpoutConfig)


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
    if name == "streams":
        return parse_streams(value)
    typ, optional = _base_type(name)
    if value is None or (optional and isinstance(value, str) and value.lower() in ("", "none")):
        if optional:
            return None
        raise ConfigError(name, value, "a value is required")
    try:
        return to_type(typ, value, join_list=name in LIST_FIELDS)
    except (ValueError, TypeError):
        raise ConfigError(name, value, f"expected {allowed_text(typ)}") from None


def coerce_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Each value turned into its field's type (ConfigError naming a bad one)."""
    return {k: _coerce(k, v) for k, v in values.items()}


def is_field(name: str) -> bool:
    """True if ``name`` is a field of :class:`SpoutConfig`."""
    return name in _HINTS


def _validate(c: SpoutConfig) -> None:
    _check_types(c)  # first: a dataclass does not check them
    if not c.region:
        from kinesis_spout.aws import resolve_region

        object.__setattr__(c, "region", resolve_region(c.profile))
    _align_streams(c)
    check_names(c)
    check_role(c.role_arn, c.role_session_name, c.external_id)
    check_numbers(c)
    check_executor_reads(c)
    check_consumer(c)
    check_targets(c)


def _align_streams(c: SpoutConfig) -> None:
    """``streams`` checked; ``stream_name`` made its first. Both may be given when
    ``stream_name`` is one of ``streams`` (``streams`` says what is read); another name is
    an error that says which key to keep."""
    if not c.streams:
        return
    check_streams(c.streams, c.region)
    first = c.streams[0].name
    names = [s.name for s in c.streams]
    if c.stream_name not in (*names, _DEFAULT_STREAM):
        raise ConfigError(
            "stream_name",
            c.stream_name,
            f"one of streams ({', '.join(map(repr, names))}) or left out: streams lists "
            f"every stream read; keep streams, or stream_name alone to read {c.stream_name!r}",
        )
    object.__setattr__(c, "stream_name", first)
    for s in c.streams:
        position = s.initial_position or c.initial_position
        if position is InitialPosition.AT_TIMESTAMP and not (
            s.initial_timestamp or c.initial_timestamp
        ):
            raise ConfigError(
                f"streams[{s.stream}].initial_timestamp", None, "required with AT_TIMESTAMP"
            )


_DEFAULT_STREAM = "demo"


def _check_types(c: SpoutConfig) -> None:
    """Each field has its type (ISO strings and position names are converted)."""
    for name in FIELD_NAMES:
        value = getattr(c, name)
        if name == "streams":
            if not (isinstance(value, tuple) and all(isinstance(v, StreamSpec) for v in value)):
                object.__setattr__(c, name, parse_streams(value))
            continue
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
        _check(ok, name, value, f"expected {allowed_text(typ)}")
        if typ is float:
            _check(math.isfinite(value), name, value, "a finite number")
