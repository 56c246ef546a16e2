"""``streams``: several streams in one job, from a file, the environment and ``--stream``
(issue 24); each bad entry is an error naming it."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

import pytest

from kinesis_spout.config import InitialPosition, SpoutConfig
from kinesis_spout.config.load import add_config_arguments, config_from_args, load_config, to_toml
from kinesis_spout.errors import ConfigError

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/payments"


def test_names_arns_and_tables_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(
        'region = "us-east-1"\n'
        f'streams = ["orders", "{ARN}", '
        '{stream = "clicks", initial_position = "latest", consumer = "efo"}]\n'
    )
    cfg = load_config(path, env={})
    assert cfg.stream_names == ("orders", "payments", "clicks")
    assert cfg.stream_name == "orders"  # the first: a single-stream job's paths
    per = {c.stream_name: c for c in cfg.per_stream()}
    assert per["payments"].stream_arn == ARN and per["orders"].stream_arn is None
    assert per["clicks"].initial_position is InitialPosition.LATEST
    assert per["clicks"].consumer == "efo" and per["orders"].consumer == "polling"
    assert per["orders"].initial_position is InitialPosition.TRIM_HORIZON
    # what to_toml writes reads back the same
    again = tmp_path / "again.toml"
    again.write_text(to_toml(cfg, ["streams", "region"]))
    assert load_config(again, env={}).streams == cfg.streams
    assert tomllib.loads(to_toml(cfg, ["streams"]))["streams"][0] == "orders"


def test_array_of_tables_and_the_environment() -> None:
    cfg = load_config(env={"KINESIS_SPOUT_STREAMS": "a, b,c"})
    assert cfg.stream_names == ("a", "b", "c")
    one = load_config(env={})
    assert one.stream_names == ("demo",) and one.per_stream() == [one]


def test_the_stream_flag_is_repeatable_and_wins() -> None:
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    args = parser.parse_args(["--stream", "a", "--stream", "b,c"])
    cfg = config_from_args(args, env={"KINESIS_SPOUT_STREAMS": "x"})
    assert cfg.stream_names == ("a", "b", "c")
    assert "--stream NAME|ARN" in parser.format_help()


@pytest.mark.parametrize(
    ("streams", "field", "said"),
    [
        ("a,b,a", "streams", "each stream once"),
        (f"payments,{ARN}", "streams", "also given as 'payments'"),
        ("a,arn:aws:kinesis:eu-west-1:123456789012:stream/b", "streams", "region 'us-east-1'"),
        ("a,b c", "streams", "stream names"),
        ("a,arn:aws:kinesis:us-east-1:12:stream/b", "streams", "stream ARNs"),
        ([{"stream": "a", "shards": 2}], "streams[a].shards", "one of stream"),
        ([{"stream": "a", "consumer": "push"}], "streams[a].consumer", "polling or efo"),
        ([{"stream": "a", "initial_position": "NOW"}], "streams[a].initial_position", "LATEST"),
        (
            [{"stream": "a", "initial_position": "AT_TIMESTAMP"}],
            "streams[a].initial_timestamp",
            "required",
        ),
        ([{"position": "LATEST"}], "streams", "a 'stream' key"),
        (7, "streams", "a list"),
    ],
)
def test_a_bad_entry_is_an_error_naming_it(streams: object, field: str, said: str) -> None:
    with pytest.raises(ConfigError) as err:
        SpoutConfig(streams=streams, region="us-east-1")  # type: ignore[arg-type]
    assert err.value.field == field, err.value
    assert said in str(err.value)


def test_stream_name_may_name_any_of_the_streams_and_streams_says_what_is_read() -> None:
    assert SpoutConfig(stream_name="a", streams="a,b").stream_name == "a"
    both = SpoutConfig(stream_name="b", streams="a,b")
    assert both.stream_names == ("a", "b") and both.stream_name == "a"
    with pytest.raises(ConfigError, match="one of streams \\('a', 'b'\\) or left out") as err:
        SpoutConfig(stream_name="c", streams="a,b")
    assert err.value.field == "stream_name"
    assert "keep streams, or stream_name alone" in str(err.value)


def test_a_flag_that_names_a_stream_wins_over_the_file(tmp_path: Path) -> None:
    """``--stream payments`` reads payments, whatever the file's ``stream_name`` and
    ``streams`` say (it once failed on a file that had both)."""
    f = tmp_path / "job.toml"
    f.write_text('stream_name = "orders"\nstreams = ["orders", "payments"]\n')
    assert load_config(f, env={}).stream_names == ("orders", "payments")
    one = load_config(f, env={}, overrides={"streams": ["payments"]})
    assert one.stream_names == ("payments",) and one.stream_name == "payments"
    named = load_config(f, env={}, overrides={"stream_name": "clicks"})
    assert named.stream_names == ("clicks",)
    env = {"KINESIS_SPOUT_STREAMS": "a,b"}
    assert load_config(f, env=env).stream_names == ("a", "b")


def test_run_forwards_each_stream_to_spark_submit(capsys: pytest.CaptureFixture[str]) -> None:
    """``kinesis-spout run --stream a --stream b`` hands both to the job (it once sent
    ``--streams "['a', 'b']"``)."""
    from kinesis_spout.cli import main

    argv = ["run", "--stream", "a", "--stream", "b", "--process", "x:y", "--dry-run"]
    assert main(argv) == 0
    assert main([*argv, "--shards-per-task", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all("--stream a --stream b" in line for line in out), out
