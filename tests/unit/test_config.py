"""SpoutConfig: sources and precedence, validation messages, round trips."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kinesis_spout.config import FIELD_DOCS, FIELD_NAMES, InitialPosition, SpoutConfig
from kinesis_spout.config.load import add_config_arguments, config_from_args, load_config, to_toml
from kinesis_spout.errors import ConfigError, KinesisSpoutError


def test_defaults_are_valid_and_match_the_issue() -> None:
    c = SpoutConfig()
    assert c.initial_position is InitialPosition.TRIM_HORIZON
    assert c.records_per_call == 10_000
    assert c.max_calls_per_second == 5.0
    assert c.endpoint_url is None
    assert c.message_timeout_or_none == 30.0
    assert SpoutConfig(message_timeout=0).message_timeout_or_none is None


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    f = tmp_path / "job.toml"
    f.write_text(
        'stream_name = "from-file"\nretry_limit = 1\n[reading]\nrecords_per_call = 500\n'
        "empty_shard_backoff = 2\n"
    )
    env = {"KINESIS_SPOUT_RETRY_LIMIT": "4", "KINESIS_SPOUT_REGION": "eu-west-1", "HOME": "/x"}
    c = load_config(f, env=env, overrides={"region": "ap-south-1", "job_name": None})
    assert c.stream_name == "from-file"
    assert c.records_per_call == 500
    assert c.empty_shard_backoff == 2.0 and isinstance(c.empty_shard_backoff, float)
    assert c.retry_limit == 4  # env beats the file
    assert c.region == "ap-south-1"  # flags beat the env
    assert c.job_name == "kinesis-spout"  # a None override is "not given"


def test_config_file_named_by_the_environment(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('stream_name = "via-env"\n')
    assert load_config(env={"KINESIS_SPOUT_CONFIG": str(f)}).stream_name == "via-env"


def test_cli_flags_override_everything(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('stream_name = "file"\nmax_in_flight = 10\n')
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    args = parser.parse_args(
        ["--config", str(f), "--max-in-flight", "99", "--initial-position", "latest"]
    )
    c = config_from_args(args, env={"KINESIS_SPOUT_MAX_IN_FLIGHT": "50"})
    assert (c.stream_name, c.max_in_flight) == ("file", 99)
    assert c.initial_position is InitialPosition.LATEST
    help_text = parser.format_help()
    assert "--records-per-call" in help_text and "GetRecords" in help_text


def test_every_field_has_a_doc() -> None:
    assert set(FIELD_DOCS) == set(FIELD_NAMES)


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("stream_name", "", "non-empty"),
        ("stream_name", "x" * 129, "128"),
        ("job_name", "a/b", "without '/'"),
        ("region", " ", "region"),
        ("endpoint_url", "localhost:4566", "http:// or https://"),
        ("role_arn", "arn:aws:iam::12345:role/r", "arn:aws:iam::ACCOUNT:role/NAME"),
        ("role_arn", "arn:aws:iam::123456789012:user/u", "an IAM role ARN"),
        ("role_session_name", "x", "set only with role_arn"),
        ("external_id", "ext-1", "set only with role_arn"),
        ("initial_position", "YESTERDAY", "TRIM_HORIZON, LATEST, AT_TIMESTAMP"),
        ("initial_timestamp", "not a time", "ISO 8601"),
        ("records_per_call", 0, "between 1 and 10000"),
        ("records_per_call", 10_001, "between 1 and 10000"),
        ("records_per_call", "many", "an integer"),
        ("records_per_call", 2.5, "an integer"),
        ("empty_shard_backoff", -1, ">= 0"),
        ("empty_shard_backoff_max", 0.5, ">= empty_shard_backoff (1.0)"),
        ("max_calls_per_second", 0, "between 0 (exclusive) and 1000"),
        ("max_calls_per_second", float("nan"), "finite"),
        ("retry_limit", -1, ">= 0"),
        ("retry_limit", True, "an integer"),
        ("retry_backoff", -0.5, ">= 0"),
        ("retry_backoff_max", 0, "> 0"),
        ("max_in_flight", 0, ">= 1"),
        ("message_timeout", -1, ">= 0"),
        ("checkpoint_interval", 0, "> 0"),
        ("checkpoint_interval", float("inf"), "finite"),
        ("checkpoint_store", "s3://bucket", "zk://host:port[,host:port]/root or dynamodb://TABLE"),
        ("checkpoint_store", "dynamodb://a", "a table name of 3 to 255"),
        ("checkpoint_store", "dynamodb://tbl?lease_seconds=0", "lease_seconds"),
        ("dead_letter", "", "a directory, s3://bucket/prefix, or 'none'"),
        ("dead_letter", "s3://A_B", "valid bucket name"),
        ("dead_letter_on", "exhausted,broken", "not 'broken'"),
        ("max_record_age", 0, "seconds > 0"),
        ("fast_retry_max_delay", -1, ">= 0"),
        ("sink", "kafka", "none, console or parquet://DIR"),
        ("no_such_knob", 1, "unknown key"),
    ],
)
def test_invalid_values_name_field_value_and_what_is_allowed(
    field: str, value: Any, allowed: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={}, overrides={field: value})
    err = info.value
    assert isinstance(err, KinesisSpoutError) and not err.retriable
    assert err.field == field
    assert f"{field}=" in str(err) and allowed in str(err)
    assert repr(value)[:20] in str(err)


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(ConfigError, match="retry_limit=-2"):
        SpoutConfig(retry_limit=-2)
    with pytest.raises(ConfigError, match="max_in_flight='9'"):
        SpoutConfig(max_in_flight="9")  # type: ignore[arg-type]
    assert SpoutConfig(initial_position="latest").initial_position is InitialPosition.LATEST  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="records_per_call=0"):
        SpoutConfig().replace(records_per_call=0)


def test_at_timestamp_needs_a_timestamp_and_naive_means_utc() -> None:
    with pytest.raises(ConfigError, match="initial_timestamp=None: required when"):
        load_config(env={}, overrides={"initial_position": "AT_TIMESTAMP"})
    c = load_config(
        env={
            "KINESIS_SPOUT_INITIAL_POSITION": "at_timestamp",
            "KINESIS_SPOUT_INITIAL_TIMESTAMP": "2026-01-31T12:00:00",
        }
    )
    assert c.initial_timestamp == datetime(2026, 1, 31, 12, tzinfo=UTC)


def test_unknown_environment_variable_is_an_error() -> None:
    with pytest.raises(ConfigError, match="KINESIS_SPOUT_RETRY_LIMT"):
        load_config(env={"KINESIS_SPOUT_RETRY_LIMT": "3"})


def test_file_errors_name_the_file_and_key(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    with pytest.raises(ConfigError, match="missing.toml"):
        load_config(missing, env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("stream_name = \n")
    with pytest.raises(ConfigError, match="valid TOML"):
        load_config(bad, env={})
    typo = tmp_path / "typo.toml"
    typo.write_text("[a]\nretry_limt = 3\n")
    with pytest.raises(ConfigError, match="retry_limt"):
        load_config(typo, env={})
    twice = tmp_path / "twice.toml"
    twice.write_text("retry_limit = 3\n[b]\nretry_limit = 4\n")
    with pytest.raises(ConfigError, match="given twice"):
        load_config(twice, env={})


def test_toml_round_trip_and_redaction(tmp_path: Path) -> None:
    c = SpoutConfig(
        stream_name="orders",
        endpoint_url="http://127.0.0.1:4566",
        initial_position=InitialPosition.AT_TIMESTAMP,
        initial_timestamp=datetime(2026, 5, 1, tzinfo=UTC),
        retry_backoff=0.25,
        zk_auth="user:secret",
        worker_id="w-1",
    )
    f = tmp_path / "out.toml"
    f.write_text(to_toml(c))
    assert load_config(f, env={}) == c
    assert c.redacted()["zk_auth"] == "***" and "secret" not in str(c.redacted())


def test_an_assumed_role_has_a_session_name_sts_takes_and_the_external_id() -> None:
    from kinesis_spout.aws import AssumedRole

    arn = "arn:aws:iam::123456789012:role/reader"
    role = SpoutConfig(role_arn=arn, job_name="billing job", region="eu-west-1").assumed_role
    assert role == AssumedRole(arn, "kinesis-spout-billing-job", None, "eu-west-1")
    named = SpoutConfig(role_arn=arn, role_session_name="nightly", external_id="x-9")
    assert named.assumed_role is not None
    assert (named.assumed_role.session_name, named.assumed_role.external_id) == ("nightly", "x-9")
    assert SpoutConfig().assumed_role is None
    with pytest.raises(ConfigError, match="role_session_name='a b'"):
        SpoutConfig(role_arn=arn, role_session_name="a b")
