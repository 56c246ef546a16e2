"""Each subcommand takes only the flags it uses, with plain help that fits a screen;
a flag, TOML key or variable that is not known says which one was meant (issue 26)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kinesis_spout.cli import build_parser, main
from kinesis_spout.config import SpoutConfig
from kinesis_spout.config.load import load_config
from kinesis_spout.errors import ConfigError


def help_of(capsys: pytest.CaptureFixture[str], *command: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.fixture(autouse=True)
def _terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps to the terminal's width


@pytest.mark.parametrize(
    "command",
    [
        ("status",),
        ("dead-letters", "redrive"),
        ("dead-letters", "list"),
        ("checkpoints",),
        ("checkpoints", "reset"),
    ],
)
def test_help_fits_one_screen_in_plain_text(
    capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    text = help_of(capsys, *command)
    assert len(text.splitlines()) <= 40, text
    assert "``" not in text and ":class:" not in text and ":mod:" not in text


def test_status_takes_only_the_flags_it_uses(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys, "status")
    for flag in ("--stream-name", "--checkpoint-store", "--region", "--profile", "--no-lag"):
        assert flag in text
    for flag in ("--sink", "--read-on", "--wait-for-lease", "--retry-limit", "--batch-size"):
        assert flag not in text
    assert "(default: 10.0)" in text and "(default: TRIM_HORIZON)" in text


def test_run_and_config_keep_every_field_as_a_flag(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("run", "config"):
        text = help_of(capsys, command)
        for f in dataclasses.fields(SpoutConfig):
            assert "--" + f.name.replace("_", "-") in text
        assert "``" not in text and "(default: 3)" in text  # retry_limit


def test_a_flag_of_another_subcommand_is_an_error_naming_where_it_belongs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["dead-letters", "list", "--delete"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "--delete is not a flag of 'dead-letters list'" in err
    assert "dead-letters redrive" in err
    with pytest.raises(SystemExit):
        main(["status", "--sink", "console"])
    assert "--sink is not a flag of 'status' (it is one of: config, run)" in (
        capsys.readouterr().err
    )


def test_a_misspelt_flag_says_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["status", "--stram-name", "orders"])
    assert "unknown flag --stram-name; did you mean --stream-name?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["dead-letters", "redrive", "--to-streem=x"])
    assert "did you mean --to-stream?" in capsys.readouterr().err


def test_dead_letters_needs_an_action() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["dead-letters"])
    args = build_parser().parse_args(["dead-letters", "redrive", "--delete", "--shard", "s"])
    assert (args.delete, args.shard, args.to_stream) == (True, "s", None)


def test_checkpoints_flags_before_or_after_reset(tmp_path: Path) -> None:
    parse = build_parser().parse_args
    args = parse(["checkpoints", "--job-name", "a", "reset", "--all", "--to-latest"])
    assert (args.cfg_job_name, args.all, args.to_latest) == ("a", True, True)
    args = parse(["checkpoints", "reset", "--job-name", "b", "--shard", "s", "--to-latest"])
    assert (args.cfg_job_name, args.shard) == ("b", "s")
    assert parse(["checkpoints", "--config", "c.toml"]).config == "c.toml"


def test_an_unknown_toml_key_or_variable_says_did_you_mean(tmp_path: Path) -> None:
    f = tmp_path / "job.toml"
    f.write_text("[retry]\nretry_limt = 5\n")
    with pytest.raises(ConfigError, match=r"retry_limt=5.*did you mean retry_limit\?"):
        load_config(f, env={})
    with pytest.raises(ConfigError, match="did you mean KINESIS_SPOUT_STREAM_NAME"):
        load_config(env={"KINESIS_SPOUT_STREAM_NAM": "x"})
    f.write_text("zzzz = 1\n")
    with pytest.raises(ConfigError, match="known: batch_max_wait, batch_size"):
        load_config(f, env={})
