"""The value checks of :class:`~kinesis_spout.config.SpoutConfig` (each names the field).

They read the config through :class:`CheckedConfig`, the fields they check, so this module
does not import the model that calls them (:mod:`kinesis_spout.config.model`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from kinesis_spout.config.values import (
    CONSUMER_NAME,
    CONSUMER_NAME_RULE,
    CONSUMERS,
    DEAD_LETTER_REASONS,
    MAX_RECORDS_PER_CALL,
    READ_ON,
    InitialPosition,
)
from kinesis_spout.errors import ConfigError


class CheckedConfig(Protocol):
    """The fields of a :class:`~kinesis_spout.config.SpoutConfig` that the checks read
    (read-only, as the frozen dataclass has them; the checks also read more of its
    number fields by name, with ``getattr``)."""

    @property
    def stream_name(self) -> str: ...
    @property
    def job_name(self) -> str: ...
    @property
    def region(self) -> str: ...
    @property
    def endpoint_url(self) -> str | None: ...
    @property
    def initial_position(self) -> InitialPosition: ...
    @property
    def initial_timestamp(self) -> datetime | None: ...
    @property
    def records_per_call(self) -> int: ...
    @property
    def empty_shard_backoff(self) -> float: ...
    @property
    def empty_shard_backoff_max(self) -> float: ...
    @property
    def max_calls_per_second(self) -> float: ...
    @property
    def consumer(self) -> str: ...
    @property
    def consumer_name(self) -> str | None: ...
    @property
    def subscription_renewal(self) -> float: ...
    @property
    def retry_limit(self) -> int: ...
    @property
    def max_in_flight(self) -> int: ...
    @property
    def checkpoint_store(self) -> str: ...
    @property
    def zk_auth(self) -> str | None: ...
    @property
    def dead_letter(self) -> str: ...
    @property
    def dead_letter_on(self) -> str: ...
    @property
    def max_record_age(self) -> float | None: ...
    @property
    def worker_id(self) -> str: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def sink(self) -> str: ...
    @property
    def max_batches(self) -> int: ...
    @property
    def read_on(self) -> str: ...
    @property
    def shards_per_task(self) -> int: ...
    @property
    def poll_threads(self) -> int: ...
    @property
    def process_partitions(self) -> int: ...
    @property
    def task_timeout(self) -> float: ...
    @property
    def metrics_port(self) -> int | None: ...
    @property
    def metrics_host(self) -> str: ...


def check(cond: bool, name: str, value: Any, allowed: str) -> None:
    if not cond:
        raise ConfigError(name, value, allowed)


def check_names(c: CheckedConfig) -> None:
    """The stream, job, region, endpoint and start position."""
    check(bool(c.stream_name.strip()), "stream_name", c.stream_name, "a non-empty stream name")
    check(len(c.stream_name) <= 128, "stream_name", c.stream_name, "at most 128 characters")
    check(
        bool(c.job_name) and "/" not in c.job_name and c.job_name not in (".", ".."),
        "job_name",
        c.job_name,
        "a non-empty name without '/'",
    )
    check(bool(c.region.strip()), "region", c.region, "a region such as us-east-1")
    if c.endpoint_url is not None:
        check(
            c.endpoint_url.startswith(("http://", "https://")),
            "endpoint_url",
            c.endpoint_url,
            "an http:// or https:// URL",
        )
    if c.initial_position is InitialPosition.AT_TIMESTAMP:
        check(
            c.initial_timestamp is not None,
            "initial_timestamp",
            c.initial_timestamp,
            "required when initial_position is AT_TIMESTAMP",
        )


def check_consumer(c: CheckedConfig) -> None:
    """``consumer``, the consumer's name and the subscription renewal."""
    check(c.consumer in CONSUMERS, "consumer", c.consumer, " or ".join(CONSUMERS))
    rule = CONSUMER_NAME_RULE
    if c.consumer_name is not None:
        check(
            bool(CONSUMER_NAME.fullmatch(c.consumer_name)), "consumer_name", c.consumer_name, rule
        )
    elif c.consumer == "efo":
        check(
            bool(CONSUMER_NAME.fullmatch(c.job_name)),
            "consumer_name",
            None,
            f"{rule}; the default, job_name {c.job_name!r}, is not one: set it",
        )
    check(
        0 < c.subscription_renewal <= 300,
        "subscription_renewal",
        c.subscription_renewal,
        "seconds, > 0 and <= 300 (Kinesis ends a subscription after 300)",
    )


def check_numbers(c: CheckedConfig) -> None:
    """Limits, counts and durations."""
    check(
        1 <= c.records_per_call <= MAX_RECORDS_PER_CALL,
        "records_per_call",
        c.records_per_call,
        f"between 1 and {MAX_RECORDS_PER_CALL}",
    )
    for name in (
        "empty_shard_backoff",
        "throttle_backoff",
        "retry_backoff",
        "fast_retry_max_delay",
        "message_timeout",
        "stop_when_idle",
    ):
        v = getattr(c, name)
        check(v >= 0, name, v, "a number of seconds >= 0")
    check(
        c.empty_shard_backoff_max >= c.empty_shard_backoff,
        "empty_shard_backoff_max",
        c.empty_shard_backoff_max,
        f"seconds >= empty_shard_backoff ({c.empty_shard_backoff})",
    )
    for name in (
        "throttle_backoff_max",
        "retry_backoff_max",
        "checkpoint_interval",
        "shard_refresh_interval",
        "batch_max_wait",
        "zk_session_timeout",
    ):
        v = getattr(c, name)
        check(v > 0, name, v, "a number of seconds > 0")
    check(
        0 < c.max_calls_per_second <= 1000,
        "max_calls_per_second",
        c.max_calls_per_second,
        "between 0 (exclusive) and 1000",
    )
    if c.max_record_age is not None:
        check(c.max_record_age > 0, "max_record_age", c.max_record_age, "seconds > 0, or unset")
    check(c.retry_limit >= 0, "retry_limit", c.retry_limit, "an integer >= 0")
    check(c.retry_limit <= 1000, "retry_limit", c.retry_limit, "at most 1000")
    check(c.max_in_flight >= 1, "max_in_flight", c.max_in_flight, "an integer >= 1")
    check(c.batch_size >= 1, "batch_size", c.batch_size, "an integer >= 1")
    check(c.max_batches >= 0, "max_batches", c.max_batches, "an integer >= 0")
    if c.metrics_port is not None:
        check(
            0 <= c.metrics_port <= 65_535,
            "metrics_port",
            c.metrics_port,
            "a TCP port between 1 and 65535 (0 = any free port), or unset for no endpoint",
        )


def check_executor_reads(c: CheckedConfig) -> None:
    """The Spark job's executor-read settings: task grouping, processing spread, deadline."""
    check(c.task_timeout >= 0, "task_timeout", c.task_timeout, "a number of seconds >= 0")
    check(
        0 <= c.process_partitions <= 100_000,
        "process_partitions",
        c.process_partitions,
        "an integer between 0 and 100000",
    )
    check(
        0 <= c.shards_per_task <= 100_000,
        "shards_per_task",
        c.shards_per_task,
        "an integer between 0 and 100000 (0 = one read task per core)",
    )
    check(
        1 <= c.poll_threads <= 16,  # the client's connection pool holds 16
        "poll_threads",
        c.poll_threads,
        "an integer between 1 and 16 (1 = a read task polls its shards one at a time)",
    )


def check_zookeeper(url: str) -> None:
    """A ``zk://`` store: the URL well formed, then kazoo installed (the ``zookeeper``
    extra), so neither is found out by a traceback when the store opens."""
    from kinesis_spout.checkpoint.zk_layout import ZkUrl

    ZkUrl.parse(url)
    try:
        import kazoo  # noqa: F401
    except ImportError:
        raise ConfigError(
            "checkpoint_store",
            url,
            "needs kazoo, which is not installed: pip install 'kinesis-spout[zookeeper]'",
        ) from None


def check_targets(c: CheckedConfig) -> None:
    """Where checkpoints, dead letters and rows go, and who this worker is."""
    check(
        c.checkpoint_store.startswith(("file://", "zk://", "dynamodb://", "memory://")),
        "checkpoint_store",
        c.checkpoint_store,
        "a URL: file://DIR, zk://host:port[,host:port]/root or dynamodb://TABLE",
    )
    if c.checkpoint_store.startswith("zk://"):
        check_zookeeper(c.checkpoint_store)
    if c.checkpoint_store.startswith("dynamodb://"):
        from kinesis_spout.checkpoint.dynamodb_url import DynamoUrl

        DynamoUrl.parse(c.checkpoint_store)  # the table name and parameters
    if c.zk_auth is not None:
        check(":" in c.zk_auth, "zk_auth", "***", "user:password")
    check(
        bool(c.dead_letter) and c.dead_letter != "s3://",
        "dead_letter",
        c.dead_letter,
        "a directory, s3://bucket/prefix, or 'none'",
    )
    if c.dead_letter.startswith("s3://"):
        bucket = c.dead_letter[5:].split("/", 1)[0]
        check(
            3 <= len(bucket) <= 63 and bucket == bucket.lower() and " " not in bucket,
            "dead_letter",
            c.dead_letter,
            "s3://bucket/prefix with a valid bucket name (3-63 lowercase characters)",
        )
    reasons = [r.strip() for r in c.dead_letter_on.split(",")]
    bad = [r for r in reasons if r not in DEAD_LETTER_REASONS]
    check(
        not bad,
        "dead_letter_on",
        c.dead_letter_on,
        "a list of " + ", ".join(DEAD_LETTER_REASONS) + (f" (not {bad[0]!r})" if bad else ""),
    )
    check(bool(c.worker_id) and "/" not in c.worker_id, "worker_id", c.worker_id, "no '/'")
    check(
        c.sink in ("none", "console") or c.sink.startswith("parquet://"),
        "sink",
        c.sink,
        "none, console or parquet://DIR",
    )
    check(
        c.read_on in READ_ON,
        "read_on",
        c.read_on,
        "executors (the only read path: the job reads on the executors and only statuses "
        "reach the driver, faster than the driver reads of earlier releases on every stream "
        "measured; remove read_on)",
    )
    check(
        bool(c.metrics_host.strip()) and " " not in c.metrics_host,
        "metrics_host",
        c.metrics_host,
        "an address or host name such as 127.0.0.1 or 0.0.0.0",
    )
