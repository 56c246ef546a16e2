"""Options, schema and packaging of the streaming source: no Spark session, no servers."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from typing import Any

import pytest

from kinesis_spout.config import InitialPosition
from kinesis_spout.errors import ConfigError
from kinesis_spout.records import Record
from kinesis_spout.streaming.options import SourceOptions, parse_options
from tracker import SequenceKey

NO_ENV: dict[str, str] = {}


def parse(**options: Any) -> SourceOptions:
    options.setdefault("checkpointStore", "file:///tmp/ks")
    return parse_options({k.lower(): v for k, v in options.items()}, env=NO_ENV)


def test_a_checkpoint_store_is_required() -> None:
    with pytest.raises(ConfigError) as info:
        parse_options({"streamname": "s"}, env=NO_ENV)
    assert info.value.field == "checkpointStore" and "where they stopped" in str(info.value)


def test_defaults() -> None:
    o = parse(streamName="orders")
    assert o.stream_name == "orders"
    assert o.region == "us-east-1"
    assert o.endpoint_url is None
    assert o.initial_position is InitialPosition.TRIM_HORIZON
    assert o.max_records_per_shard == 10_000
    assert o.max_records_per_trigger is None
    assert o.checkpoint_store == "file:///tmp/ks"
    assert o.job_name == "spark-orders"
    assert o.fail_on_data_loss is True


def test_keys_are_case_insensitive_and_all_options_parse() -> None:
    o = parse_options(
        {
            "STREAMNAME": "s",
            "Region": "eu-west-1",
            "endpointurl": "http://127.0.0.1:1",
            "initialPosition": "AT_TIMESTAMP",
            "initialTimestamp": "2026-01-31T12:00:00",
            "maxRecordsPerShard": "5",
            "maxRecordsPerTrigger": "12",
            "maxRecordsPerFetch": "100",
            "checkpointStore": "zk://127.0.0.1:2181/ks",
            "jobName": "billing",
            "zkAuth": "u:p",
            "failOnDataLoss": "false",
        },
        env=NO_ENV,
    )
    assert (o.region, o.endpoint_url) == ("eu-west-1", "http://127.0.0.1:1")
    assert o.initial_position is InitialPosition.AT_TIMESTAMP
    assert o.initial_timestamp == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert (o.max_records_per_shard, o.max_records_per_trigger, o.max_records_per_fetch) == (
        5,
        12,
        100,
    )
    assert (o.checkpoint_store, o.job_name, o.zk_auth) == (
        "zk://127.0.0.1:2181/ks",
        "billing",
        "u:p",
    )
    assert o.fail_on_data_loss is False


@pytest.mark.parametrize(
    ("value", "expected"),
    [("earliest", InitialPosition.TRIM_HORIZON), ("Latest", InitialPosition.LATEST)],
)
def test_initial_position_aliases(value: str, expected: InitialPosition) -> None:
    assert parse(streamName="s", initialPosition=value).initial_position is expected


def test_databricks_style_at_timestamp_json() -> None:
    o = parse(streamName="s", initialPosition='{"at_timestamp": "2026-01-31T12:00:00+01:00"}')
    assert o.initial_timestamp == datetime(2026, 1, 31, 11, tzinfo=UTC)


def test_environment_gives_region_and_endpoint() -> None:
    env = {"AWS_DEFAULT_REGION": "ap-south-1", "AWS_ENDPOINT_URL_KINESIS": "http://h:1"}
    o = parse_options({"streamname": "s", "checkpointstore": "file:///tmp/ks"}, env=env)
    assert (o.region, o.endpoint_url) == ("ap-south-1", "http://h:1")


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({}, "streamName"),
        ({"streamName": "bad/name"}, "streamName"),
        ({"streamName": "s", "maxRecordsPerShard": "0"}, "maxRecordsPerShard"),
        ({"streamName": "s", "maxRecordsPerShard": "ten"}, "maxRecordsPerShard"),
        ({"streamName": "s", "maxRecordsPerFetch": "10001"}, "maxRecordsPerFetch"),
        ({"streamName": "s", "maxRecordsPerTrigger": "-1"}, "maxRecordsPerTrigger"),
        ({"streamName": "s", "initialPosition": "newest"}, "initialPosition"),
        ({"streamName": "s", "initialPosition": "at_timestamp"}, "initialTimestamp"),
        ({"streamName": "s", "initialTimestamp": "2026-01-01"}, "initialTimestamp"),
        (
            {"streamName": "s", "initialPosition": "at_timestamp", "initialTimestamp": "x"},
            "initialTimestamp",
        ),
        ({"streamName": "s", "endpointUrl": "localhost:4566"}, "endpointUrl"),
        ({"streamName": "s", "checkpointStore": "memory://"}, "checkpointStore"),
        ({"streamName": "s", "checkpointStore": "/tmp/x"}, "checkpointStore"),
        ({"streamName": "s", "jobName": "a/b"}, "jobName"),
        ({"streamName": "s", "zkAuth": "nocolon"}, "zkAuth"),
        ({"streamName": "s", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"streamName": "s", "maxRecordPerShard": "5"}, "maxrecordpershard"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(**options)
    assert info.value.field == field
    assert field in str(info.value)


def test_unknown_secret_option_is_masked() -> None:
    with pytest.raises(ConfigError) as info:
        parse(streamName="s", awsSecretKey="hunter2")
    assert "hunter2" not in str(info.value)


# --- the pieces that travel to executors -------------------------------------------------


def test_arrow_schema_is_what_pyspark_checks_and_rows_convert() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from kinesis_spout.streaming.source import SCHEMA, arrow_schema, to_arrow

    assert arrow_schema().equals(to_arrow_schema(SCHEMA, timezone="UTC"))
    arrival = datetime(2026, 1, 31, 13, 0, tzinfo=UTC)
    recs = [
        Record("s", "shardId-1", "17", i, f"pk{i}", b"\x00\xff", arrival, SequenceKey(17, i))
        for i in range(3)
    ]
    batch = to_arrow(recs)
    assert batch.schema.equals(arrow_schema())
    rows = batch.to_pylist()
    assert rows[2] == {
        "data": b"\x00\xff",
        "streamName": "s",
        "shardId": "shardId-1",
        "sequenceNumber": "17",
        "subSequenceNumber": 2,
        "partitionKey": "pk2",
        "approximateArrivalTimestamp": arrival,
    }


def test_reader_pickles_without_runtime_state() -> None:
    from kinesis_spout.streaming.source import KinesisStreamReader

    reader = KinesisStreamReader(parse(streamName="s", endpointUrl="http://127.0.0.1:9"))
    reader.planner.cutoff = datetime.now(UTC)  # builds the offset-process state
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.options == reader.options
    assert copy._planner is None


def test_missing_pyarrow_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from kinesis_spout.streaming import source
    from kinesis_spout.streaming.errors import MissingDependencyError

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a)
    )
    with pytest.raises(MissingDependencyError, match=r"pyarrow.*kinesis-spout\[spark\]"):
        source.check_dependencies()


def test_package_exports_load_lazily() -> None:
    import kinesis_spout.streaming as pkg

    assert pkg.KinesisDataSource.name() == "kinesis"
    with pytest.raises(AttributeError):
        pkg.nothing_here  # noqa: B018


def test_the_aws_connectors_and_databricks_names_are_aliases() -> None:
    """``kinesis.streamName``, ``kinesis.region``, ``kinesis.startingPosition`` (the AWS
    connector's), ``startingPosition`` and ``endpoint`` (Databricks') were rejected as
    unknown options, though the docs said the names follow those connectors."""
    aws = parse(
        **{
            "kinesis.streamName": "orders",
            "kinesis.region": "eu-west-1",
            "kinesis.endpointUrl": "http://127.0.0.1:4567",
            "kinesis.startingPosition": "LATEST",
            "kinesis.consumerType": "SubscribeToShard",
            "kinesis.consumerName": "billing-efo",
            "kinesis.maxFetchRecordsPerShard": "500",
            "kinesis.getRecords.numberOfRecordsPerFetch": "250",
        }
    )
    assert (aws.stream_name, aws.region, aws.endpoint_url) == (
        "orders",
        "eu-west-1",
        "http://127.0.0.1:4567",
    )
    assert aws.initial_position is InitialPosition.LATEST
    assert (aws.consumer, aws.consumer_name) == ("efo", "billing-efo")
    assert (aws.max_records_per_shard, aws.max_records_per_fetch) == (500, 250)
    assert parse(**{"kinesis.streamName": "o", "kinesis.consumerType": "GetRecords"}).consumer == (
        "polling"
    )
    databricks = parse(
        streamName="orders", endpoint="http://127.0.0.1:4567", startingPosition="earliest"
    )
    assert databricks.endpoint_url == "http://127.0.0.1:4567"
    assert databricks.initial_position is InitialPosition.TRIM_HORIZON
    assert parse(streamName="o", consumerMode="efo").consumer == "efo"


def test_an_alias_is_named_as_given_and_an_option_given_twice_is_an_error() -> None:
    with pytest.raises(ConfigError) as info:
        parse(**{"kinesis.streamName": "o", "kinesis.startingPosition": "OLDEST"})
    assert str(info.value).startswith(
        "invalid config kinesis.startingPosition (initialPosition)='OLDEST': trim_horizon"
    )
    with pytest.raises(ConfigError) as info:
        parse(streamName="o", **{"kinesis.streamName": "p"})
    assert "is the same option" in str(info.value)


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("streamname2", "streamName"),
        ("kinesis.streamnam", "kinesis.streamName"),
        ("maxrecordspershards", "maxRecordsPerShard"),
        ("kinesis.startingpositon", "kinesis.startingPosition"),
    ],
)
def test_an_unknown_option_says_did_you_mean(key: str, meant: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options({"streamname": "o", key: "1", "checkpointstore": "file:///x"}, env=NO_ENV)
    assert f"unknown option of the kinesis source; did you mean {meant}?" in str(info.value)


def test_the_docs_table_every_option_and_alias() -> None:
    from pathlib import Path

    from kinesis_spout.streaming.options import ALIASES, OPTIONS

    docs = (Path(__file__).resolve().parents[2] / "docs" / "streaming-source.md").read_text()
    section = docs[docs.index("\n## Options\n") : docs.index("\n## How it works\n")]
    rows = {
        line.split("|")[1].strip().strip("`"): line.split("|")[2]
        for line in section.splitlines()
        if line.startswith("| `")
    }
    assert set(rows) == set(OPTIONS)
    for name, aliases in ALIASES.items():
        for alias in aliases:
            assert f"`{alias}`" in rows[name], (name, alias)
