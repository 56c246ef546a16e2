"""Options of ``spark.readStream.format("kinesis")``, parsed and validated: pure.

Names follow the existing Spark Kinesis connectors where one exists
(``streamName``, ``streamARN``, ``region``, ``endpointUrl``, ``initialPosition`` as in
the Databricks and Qubole connectors), and the names of the AWS connector
(``kinesis.streamName``, ...) and Databricks' others (``endpoint``, ``startingPosition``)
are taken as aliases (:data:`ALIASES`), so a query moves here unchanged. ``streamName``
and ``streamARN`` take several streams, comma-separated; they are parsed and checked as
the reader's ``streams`` are (:mod:`kinesis_spout.config.streams`), with errors naming
the option. Spark lower-cases option keys, so they are matched case-insensitively. An
unknown option is an error with the close match, not ignored: a typo in
``maxRecordsPerShard`` must not silently read unbounded batches.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kinesis_spout.config import (
    CONSUMER_NAME,
    CONSUMER_NAME_RULE,
    CONSUMERS,
    MAX_RECORDS_PER_CALL,
    InitialPosition,
)
from kinesis_spout.config.load import did_you_mean
from kinesis_spout.config.streams import STREAM_ARN, StreamSpec, check_streams, parse_streams
from kinesis_spout.errors import ConfigError

DEFAULT_MAX_RECORDS_PER_SHARD = 10_000

#: Canonical option names and what each means (shown in errors and docs).
OPTIONS: dict[str, str] = {
    "streamName": "the Kinesis streams to read, comma-separated names (this or streamARN "
    "is required)",
    "streamARN": "streams to read by ARN, comma-separated "
    "arn:aws:kinesis:REGION:ACCOUNT:stream/NAME (in the source's region)",
    "region": "AWS region (default: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1)",
    "endpointUrl": "Kinesis endpoint, e.g. an emulator (default: AWS_ENDPOINT_URL[_KINESIS])",
    "initialPosition": "trim_horizon (default), earliest, latest, at_timestamp, "
    'or {"at_timestamp": "<ISO 8601>"}',
    "initialTimestamp": "ISO 8601 start time for initialPosition=at_timestamp",
    "maxRecordsPerShard": f"most records one batch reads per shard "
    f"(default {DEFAULT_MAX_RECORDS_PER_SHARD})",
    "maxRecordsPerTrigger": "most records one batch reads over all shards (default: no limit)",
    "maxRecordsPerFetch": f"GetRecords Limit, 1..{MAX_RECORDS_PER_CALL} "
    f"(default {MAX_RECORDS_PER_CALL})",
    "checkpointStore": "file://DIR, zk://host:port[,host:port]/root or dynamodb://TABLE "
    "(in the source's region; required): the "
    "executors record where each batch's read of each shard stopped, and commit() writes "
    "per-shard checkpoints there",
    "jobName": "job name of those checkpoints (default: spark-<stream>[-<stream>...])",
    "zkAuth": "user:password for ZooKeeper digest ACLs",
    "failOnDataLoss": "true (default): fail when planned records are gone; false: log and go on",
    "consumer": "polling (default: GetRecords) or efo (enhanced fan-out: the executors "
    "subscribe with SubscribeToShard)",
    "consumerName": "the enhanced fan-out consumer, registered if absent (default: jobName)",
}
ALIASES: dict[str, tuple[str, ...]] = {
    "streamName": ("kinesis.streamName",),
    "region": ("kinesis.region",),
    "endpointUrl": ("endpoint", "kinesis.endpointUrl"),
    "initialPosition": ("startingPosition", "kinesis.startingPosition"),
    "maxRecordsPerShard": ("kinesis.maxFetchRecordsPerShard",),
    "maxRecordsPerFetch": ("kinesis.getRecords.numberOfRecordsPerFetch",),
    "consumer": ("consumerMode", "kinesis.consumerType"),
    "consumerName": ("kinesis.consumerName",),
}
"""Other connectors' names of an option: the AWS connector's (``kinesis.*``) and
Databricks' (``endpoint``, ``startingPosition``, ``consumerMode``). docs/streaming-source.md
tables them."""
_BY_LOWER = {k.lower(): k for k in OPTIONS}
_BY_LOWER.update({a.lower(): k for k, names in ALIASES.items() for a in names})
_SPELLED = {k.lower(): k for k in OPTIONS} | {
    a.lower(): a for names in ALIASES.values() for a in names
}
"""Each option name, lower-cased (as Spark passes it), as the documentation spells it."""
_CONSUMER_VALUES = {"getrecords": "polling", "subscribetoshard": "efo"}
"""The AWS connector's ``kinesis.consumerType`` values."""
_STORE_NEEDED = (
    "file://DIR (local mode, or a file system every executor shares), "
    "zk://host:port[,host:port]/root or dynamodb://TABLE: each batch's tasks record there "
    "where they stopped, "
    "and commit() writes the shards' checkpoints"
)

_POSITIONS = {
    "trim_horizon": InitialPosition.TRIM_HORIZON,
    "earliest": InitialPosition.TRIM_HORIZON,
    "latest": InitialPosition.LATEST,
    "at_timestamp": InitialPosition.AT_TIMESTAMP,
}


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The validated options; picklable (it travels to the executors)."""

    streams: tuple[StreamSpec, ...]
    """The streams read, as given (``streamName`` entries, then ``streamARN`` ones)."""
    region: str = "us-east-1"
    endpoint_url: str | None = None
    initial_position: InitialPosition = InitialPosition.TRIM_HORIZON
    initial_timestamp: datetime | None = None
    max_records_per_shard: int = DEFAULT_MAX_RECORDS_PER_SHARD
    max_records_per_trigger: int | None = None
    max_records_per_fetch: int = MAX_RECORDS_PER_CALL
    checkpoint_store: str | None = None
    job_name: str = ""
    zk_auth: str | None = None
    fail_on_data_loss: bool = True
    consumer: str = "polling"
    consumer_name: str = ""
    """The enhanced fan-out consumer (``consumer = "efo"``)."""
    # Not options: pacing of the offset process (Kinesis allows 5 GetRecords/s per shard).
    idle_poll_interval: float = 0.25
    """Seconds a shard whose last read reached its tip waits for its next batch."""
    shard_list_interval: float = 1.0
    """Seconds a ListShards answer is reused (ListShards allows 100 calls/s per stream)."""

    @property
    def stream_name(self) -> str:
        """The streams' names, comma-separated (one stream: its name); for messages."""
        return ",".join(s.name for s in self.streams)

    @property
    def owner(self) -> str:
        """The owner name written into checkpoints."""
        return f"spark-source:{self.job_name}"


def _int(name: str, value: str, low: int, high: int | None = None) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        n = low - 1
    if n < low or (high is not None and n > high):
        allowed = f"an integer between {low} and {high}" if high else f"an integer >= {low}"
        raise ConfigError(name, value, allowed)
    return n


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise ConfigError(name, value, "true or false")


def _timestamp(name: str, value: str) -> datetime:
    try:
        ts = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ConfigError(
            name, value, "an ISO 8601 timestamp such as 2026-01-31T12:00:00Z"
        ) from None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def _position(value: str) -> tuple[InitialPosition, datetime | None]:
    text = value.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or set(doc) != {"at_timestamp"}:
            raise ConfigError(
                "initialPosition", value, 'JSON of the form {"at_timestamp": "<ISO 8601>"}'
            )
        return InitialPosition.AT_TIMESTAMP, _timestamp("initialPosition", str(doc["at_timestamp"]))
    try:
        return _POSITIONS[text.lower()], None
    except KeyError:
        raise ConfigError("initialPosition", value, OPTIONS["initialPosition"]) from None


def parse_options(
    options: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> SourceOptions:
    """Validate Spark's option map; :class:`ConfigError` names the bad option.

    Defaults that come from the environment (region, endpoint) are resolved
    here, in the driver, so every executor uses the same values.
    """
    env = os.environ if env is None else env
    given, spelled = _known(options)
    try:
        return _parse(given, env)
    except ConfigError as exc:  # name the option as the query spelled it
        if exc.field in spelled and spelled[exc.field] != exc.field:
            field = f"{spelled[exc.field]} ({exc.field})"
            raise ConfigError(field, exc.value, exc.allowed) from None
        raise


def _parse(given: Mapping[str, str], env: Mapping[str, str]) -> SourceOptions:
    region, endpoint = _location(given, env)
    streams = _streams(given, region)
    position, timestamp = _start(given)
    store, job, zk_auth = _store(given, streams)
    consumer, consumer_name = _consumer(given, job)
    per_trigger = given.get("maxRecordsPerTrigger")
    opts = SourceOptions(
        streams=streams,
        region=region,
        endpoint_url=endpoint,
        initial_position=position,
        initial_timestamp=timestamp,
        max_records_per_shard=_int(
            "maxRecordsPerShard",
            given.get("maxRecordsPerShard", str(DEFAULT_MAX_RECORDS_PER_SHARD)),
            1,
        ),
        max_records_per_trigger=_int("maxRecordsPerTrigger", per_trigger, 1)
        if per_trigger
        else None,
        max_records_per_fetch=_int(
            "maxRecordsPerFetch",
            given.get("maxRecordsPerFetch", str(MAX_RECORDS_PER_CALL)),
            1,
            MAX_RECORDS_PER_CALL,
        ),
        checkpoint_store=store,
        job_name=job,
        zk_auth=zk_auth,
        fail_on_data_loss=_bool("failOnDataLoss", given.get("failOnDataLoss", "true")),
        consumer=consumer,
        consumer_name=consumer_name,
    )
    if store is None:
        raise ConfigError("checkpointStore", None, _STORE_NEEDED)
    return opts


def _known(options: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """The options by canonical name, as strings, and the name each was given under; an
    unknown option is an error with the close match (its value hidden when the name
    looks like a secret), and so is an option given twice under two of its names."""
    given: dict[str, str] = {}
    spelled: dict[str, str] = {}
    for key, value in options.items():
        lower = str(key).lower()
        name = _BY_LOWER.get(lower)
        if name is None:
            secret = any(w in lower for w in ("auth", "secret", "password", "key"))
            said = did_you_mean(lower, list(_SPELLED))
            close = said.removeprefix("; did you mean ").removesuffix("?")
            hint = f"; did you mean {_SPELLED[close]}?" if close in _SPELLED else ""
            raise ConfigError(
                str(key),
                "***" if secret else value,
                f"unknown option of the kinesis source{hint} (options and their other "
                "connectors' names: docs/streaming-source.md#options)",
            )
        if name in spelled:
            raise ConfigError(
                _SPELLED[lower], value, f"given once: {spelled[name]} is the same option"
            )
        given[name] = "" if value is None else str(value)
        spelled[name] = _SPELLED[lower]
    return given, spelled


_NAME_RULE = (
    "comma-separated stream names, each 1..128 characters of a-z, A-Z, 0-9, _ . - "
    "(ARNs go in streamARN)"
)
_ARN_RULE = (
    "comma-separated stream ARNs, each arn:aws:kinesis:REGION:ACCOUNT:stream/NAME "
    "(names go in streamName)"
)


def _streams(given: Mapping[str, str], region: str) -> tuple[StreamSpec, ...]:
    """The streams of ``streamName`` and ``streamARN``: at least one, none twice, every ARN
    in ``region`` (:func:`~kinesis_spout.config.streams.check_streams`)."""
    streams = _entries(given, "streamName", arn=False) + _entries(given, "streamARN", arn=True)
    if not streams:
        raise ConfigError("streamName", given.get("streamName"), OPTIONS["streamName"])
    try:
        check_streams(streams, region)
    except ConfigError as exc:  # it names "streams": name the option instead
        option = "streamARN" if STREAM_ARN.fullmatch(str(exc.value)) else "streamName"
        raise ConfigError(option, exc.value, exc.allowed.replace("config's", "source's")) from None
    return streams


def _entries(given: Mapping[str, str], option: str, *, arn: bool) -> tuple[StreamSpec, ...]:
    """The comma-separated entries of ``option``: names, or (``arn``) ARNs."""
    rule = _ARN_RULE if arn else _NAME_RULE
    try:
        streams = parse_streams(given.get(option, ""))
    except ConfigError as exc:
        raise ConfigError(option, exc.value, rule) from None
    for s in streams:
        if (s.arn is not None) != arn:
            raise ConfigError(option, s.stream, rule)
    return streams


def _location(given: Mapping[str, str], env: Mapping[str, str]) -> tuple[str, str | None]:
    """The region and the endpoint URL (options first, then the AWS environment)."""
    region = given.get("region") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    region = (region or "us-east-1").strip()
    endpoint = (
        given.get("endpointUrl")
        or env.get("AWS_ENDPOINT_URL_KINESIS")
        or env.get("AWS_ENDPOINT_URL")
        or None
    )
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise ConfigError("endpointUrl", endpoint, "an http:// or https:// URL")
    return region, endpoint


def _start(given: Mapping[str, str]) -> tuple[InitialPosition, datetime | None]:
    """The initial position and its timestamp (required with, and only with, at_timestamp)."""
    position, timestamp = _position(given.get("initialPosition", "trim_horizon"))
    if "initialTimestamp" in given:
        if position is not InitialPosition.AT_TIMESTAMP or timestamp is not None:
            raise ConfigError(
                "initialTimestamp",
                given["initialTimestamp"],
                "only with initialPosition=at_timestamp",
            )
        timestamp = _timestamp("initialTimestamp", given["initialTimestamp"])
    if position is InitialPosition.AT_TIMESTAMP and timestamp is None:
        raise ConfigError(
            "initialTimestamp", None, "required with initialPosition=at_timestamp (ISO 8601)"
        )
    return position, timestamp


def _consumer(given: Mapping[str, str], job: str) -> tuple[str, str]:
    """How shards are read, and the enhanced fan-out consumer's name."""
    consumer = given.get("consumer", "polling").strip().lower()
    consumer = _CONSUMER_VALUES.get(consumer, consumer)
    if consumer not in CONSUMERS:
        raise ConfigError(
            "consumer",
            given.get("consumer"),
            " or ".join(CONSUMERS) + " (kinesis.consumerType: GetRecords or SubscribeToShard)",
        )
    name = given.get("consumerName", "").strip() or job
    if (consumer == "efo" or given.get("consumerName")) and not CONSUMER_NAME.fullmatch(name):
        which = "consumerName" if given.get("consumerName") else "consumerName (default: jobName)"
        raise ConfigError(which, name, CONSUMER_NAME_RULE)
    return consumer, name


def _store(
    given: Mapping[str, str], streams: tuple[StreamSpec, ...]
) -> tuple[str | None, str, str | None]:
    """The checkpoint store URL, the job name and the ZooKeeper auth."""
    store = given.get("checkpointStore") or None
    if store is not None and not store.startswith(("file://", "zk://", "dynamodb://")):
        raise ConfigError(
            "checkpointStore",
            store,
            _STORE_NEEDED + " (memory:// cannot work: they run in separate processes)",
        )
    if store is not None and store.startswith("dynamodb://"):
        from kinesis_spout.checkpoint.dynamodb_url import DynamoUrl

        try:
            DynamoUrl.parse(store)
        except ConfigError as exc:
            raise ConfigError("checkpointStore", store, exc.allowed) from None
    job = given.get("jobName") or _default_job(streams)
    if "/" in job or job in (".", ".."):
        raise ConfigError("jobName", job, "a non-empty name without '/'")
    zk_auth = given.get("zkAuth") or None
    if zk_auth is not None and ":" not in zk_auth:
        raise ConfigError("zkAuth", "***", "user:password")
    return store, job, zk_auth


def _default_job(streams: tuple[StreamSpec, ...]) -> str:
    """``spark-<stream>``, or with several streams ``spark-<stream>-<stream>...`` (in the
    order given); a default longer than 128 characters is an error asking for ``jobName``
    (it is a path component and the default consumer name)."""
    job = "spark-" + "-".join(s.name for s in streams)
    if len(streams) > 1 and len(job) > 128:
        raise ConfigError(
            "jobName",
            None,
            f"required with these {len(streams)} streams: the default {job[:40]}... is "
            "longer than 128 characters",
        )
    return job
