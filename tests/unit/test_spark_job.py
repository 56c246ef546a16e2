"""The job's command line: config precedence, ``kinesis-spout run`` and ``demo`` flags."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kinesis_spout.cli import build_parser
from kinesis_spout.config import SpoutConfig
from kinesis_spout.errors import ConfigError, KinesisSpoutError
from kinesis_spout.spark import job as job_module
from kinesis_spout.spark.job import build_arg_parser, describe, job_config
from kinesis_spout.spark.submit import (
    DEFAULT_MASTER,
    SparkSubmitNotFoundError,
    build_command,
    find_spark_submit,
    job_environment,
    job_file,
)

JOB_TOML = """
process = "mymod:handle"
stream_name = "orders"
[reliability]
retry_limit = 5
retry_backoff = 0.5
max_in_flight = 200
message_timeout = 12
checkpoint_interval = 3
checkpoint_store = "zk://127.0.0.1:2181/ks"
dead_letter = "/var/dlq"
[spark]
batch_size = 2000
batch_max_wait = 0.25
sink = "parquet:///tmp/out"
"""


@pytest.fixture
def toml(tmp_path: Path) -> Path:
    p = tmp_path / "job.toml"
    p.write_text(JOB_TOML)
    return p


def test_every_knob_comes_from_the_file(toml: Path) -> None:
    args = build_arg_parser().parse_args(["--config", str(toml)])
    cfg, process = job_config(args, env={})
    assert process == "mymod:handle"
    assert (cfg.stream_name, cfg.retry_limit, cfg.retry_backoff, cfg.max_in_flight) == (
        "orders",
        5,
        0.5,
        200,
    )
    assert (cfg.message_timeout, cfg.checkpoint_interval, cfg.batch_size) == (12.0, 3.0, 2000)
    assert cfg.checkpoint_store == "zk://127.0.0.1:2181/ks" and cfg.dead_letter == "/var/dlq"
    assert cfg.batch_max_wait == 0.25 and cfg.sink == "parquet:///tmp/out"


def test_flags_beat_the_environment_which_beats_the_file(toml: Path) -> None:
    args = build_arg_parser().parse_args(
        ["--config", str(toml), "--retry-limit", "1", "--process", "other:fn"]
    )
    env = {"KINESIS_SPOUT_RETRY_LIMIT": "4", "KINESIS_SPOUT_BATCH_SIZE": "7"}
    cfg, process = job_config(args, env=env)
    assert cfg.retry_limit == 1 and cfg.batch_size == 7 and process == "other:fn"


def test_the_config_file_can_come_from_the_environment(toml: Path) -> None:
    cfg, process = job_config(
        build_arg_parser().parse_args([]), env={"KINESIS_SPOUT_CONFIG": str(toml)}
    )
    assert cfg.stream_name == "orders" and process == "mymod:handle"


def test_bad_files_and_values_name_the_culprit(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("retry_limt = 3\n")
    with pytest.raises(ConfigError, match="retry_limt"):
        job_config(build_arg_parser().parse_args(["--config", str(bad)]), env={})
    bad.write_text("process = 3\n")
    with pytest.raises(ConfigError, match="process"):
        job_config(build_arg_parser().parse_args(["--config", str(bad)]), env={})
    missing = tmp_path / "missing.toml"
    with pytest.raises(ConfigError, match="readable TOML"):
        job_config(build_arg_parser().parse_args(["--config", str(missing)]), env={})
    with pytest.raises(ConfigError, match="batch_size"):
        job_config(build_arg_parser().parse_args(["--batch-size", "0"]), env={})


def test_the_job_exits_2_without_a_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert job_module.main([]) == 2
    assert "--process module:function" in capsys.readouterr().err


def test_the_banner_names_stores_and_limits(toml: Path) -> None:
    cfg, process = job_config(build_arg_parser().parse_args(["--config", str(toml)]), env={})
    line = describe(cfg, process or "")
    assert "zk://127.0.0.1:2181/ks" in line and "retry_limit 5" in line and "/var/dlq" in line


# --- kinesis-spout run ----------------------------------------------------------------


def run_args(*argv: str) -> object:
    return build_parser().parse_args(["run", *argv])


def test_run_builds_a_spark_submit_command_with_quiet_defaults(toml: Path) -> None:
    args = run_args("--config", str(toml), "--batch-size", "50", "--process", "m:f")
    cmd = build_command(args, "/opt/spark-submit")  # type: ignore[arg-type]
    assert cmd[:3] == ["/opt/spark-submit", "--master", DEFAULT_MASTER]
    assert "spark.ui.showConsoleProgress=false" in cmd
    i = cmd.index(str(job_file()))
    assert cmd[i + 1 :] == [
        "--config",
        str(toml.resolve()),
        "--process",
        "m:f",
        "--batch-size",
        "50",
    ]
    assert job_file().name == "job.py" and job_file().exists()


def test_spark_conf_overrides_the_defaults_and_is_checked() -> None:
    args = run_args("--master", "local[4]", "--spark-conf", "spark.log.level=INFO")
    cmd = build_command(args, "spark-submit")  # type: ignore[arg-type]
    assert cmd[2] == "local[4]"
    assert "spark.log.level=INFO" in cmd and "spark.log.level=WARN" not in cmd
    with pytest.raises(KinesisSpoutError, match="KEY=VALUE"):
        build_command(run_args("--spark-conf", "novalue"), "spark-submit")  # type: ignore[arg-type]


def test_run_finds_spark_submit_next_to_this_python() -> None:
    found = find_spark_submit()
    assert Path(found).name == "spark-submit"
    assert Path(found).parent == Path(sys.executable).parent
    with pytest.raises(SparkSubmitNotFoundError, match="no such program"):
        find_spark_submit("/nowhere/spark-submit")


def test_the_job_runs_with_this_python_on_loopback() -> None:
    env = job_environment({"PATH": "/bin"}, master="local[2]")
    assert env["PYSPARK_PYTHON"] == sys.executable == env["PYSPARK_DRIVER_PYTHON"]
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert "SPARK_LOCAL_IP" not in job_environment({}, master="spark://host:7077")


def test_run_refuses_to_start_without_a_process(toml: Path) -> None:
    from kinesis_spout.spark.submit import cmd_run

    toml.write_text('stream_name = "x"\n')
    with pytest.raises(KinesisSpoutError, match="no processing given"):
        cmd_run(run_args("--config", str(toml)))  # type: ignore[arg-type]


def test_run_dry_run_prints_the_command(toml: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kinesis_spout.cli import main

    assert main(["run", "--config", str(toml), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "spark-submit --master local[2]" in out and "--process mymod:handle" in out


def test_run_starts_spark_submit_without_importing_botocore_or_other_subcommands(
    toml: Path,
) -> None:
    """The launcher's imports delay every job's start: ``run`` with the region in the
    environment imports neither botocore (0.2 s here) nor the status, dead-letter or demo
    commands (the version that built every subcommand's flags imported them all)."""
    import subprocess

    code = (
        "import sys; from kinesis_spout.cli import main; "
        f"main(['run', '--config', {str(toml)!r}, '--dry-run']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'botocore' or m in "
        "('kinesis_spout.status.command', 'kinesis_spout.deadletter.cli', "
        "'kinesis_spout.examples.demo')))"
    )
    env = {"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "eu-west-1"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert out.splitlines()[-1] == "[]", out


def test_demo_flags() -> None:
    args = build_parser().parse_args(["demo", "--output", "/tmp/x", "--sentences", "10"])
    assert (args.output, args.sentences, args.shards, args.fresh) == ("/tmp/x", 10, 2, False)


def test_cluster_deploy_mode_refuses_driver_local_checkpoints_and_dead_letters(
    toml: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kinesis_spout.cli import main
    from kinesis_spout.config import SpoutConfig
    from kinesis_spout.errors import ConfigError
    from kinesis_spout.spark.launch.deploy import check_deploy_mode

    local = ["--checkpoint-store", "file:///tmp/cp", "--deploy-mode", "cluster", "--dry-run"]
    assert main(["run", "--config", str(toml), *local]) == 2
    assert "checkpoint_store='file:///tmp/cp'" in capsys.readouterr().err
    assert main(["run", "--config", str(toml), "--deploy-mode", "cluster", "--dry-run"]) == 2
    assert "dead_letter='/var/dlq'" in capsys.readouterr().err
    zk = SpoutConfig(checkpoint_store="zk://127.0.0.1:2181/x")
    with pytest.raises(ConfigError, match="dead_letter"):
        check_deploy_mode(zk, "cluster")
    check_deploy_mode(zk.replace(dead_letter="none"), "cluster")
    check_deploy_mode(zk.replace(dead_letter="s3://dead-letters/job"), "cluster")
    check_deploy_mode(SpoutConfig(), "client")
    args = ["run", "--config", str(toml), "--checkpoint-store", "zk://127.0.0.1:2181/x"]
    assert main([*args, "--dead-letter", "none", "--deploy-mode", "cluster", "--dry-run"]) == 0
    assert "--deploy-mode cluster" in capsys.readouterr().out


def test_driver_reads_are_gone_with_an_error_that_says_what_to_use() -> None:
    with pytest.raises(ConfigError) as err:
        SpoutConfig(stream_name="s", read_on="driver")
    assert err.value.field == "read_on"
    assert "executors (the only read path" in str(err.value)
    assert "remove read_on" in str(err.value)
    assert SpoutConfig(stream_name="s", read_on="executors").read_on == "executors"
