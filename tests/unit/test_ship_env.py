"""``kinesis-spout run --ship-env``: the spark-submit arguments it adds, an archive given
beforehand, the dry run, its clear errors, and the one line of a job whose executors cannot
import kinesis_spout. (Packing a virtualenv and running on executors that lack the package:
``tests/integration/spark/test_cluster.py``.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kinesis_spout.cli import build_parser
from kinesis_spout.spark.isolation import missing_on_executors
from kinesis_spout.spark.launch.shipenv import (
    PACK_NOW,
    ShipEnvError,
    pack_virtualenv,
    ship_env_arguments,
    shipped_env,
)
from kinesis_spout.spark.submit import build_command, job_file


def test_client_mode_ships_the_archive_for_the_executors_and_keeps_the_drivers_python() -> None:
    assert ship_env_arguments("/tmp/env.tar.gz") == [
        "--archives",
        "/tmp/env.tar.gz#environment",
        "--conf",
        "spark.pyspark.python=./environment/bin/python",
        "--conf",
        f"spark.pyspark.driver.python={sys.executable}",
    ]
    cluster = ship_env_arguments("s3://b/env.tar.gz", "cluster")
    assert not any("driver.python" in a for a in cluster)  # the driver runs in the archive


def test_the_arguments_go_before_the_job_file(tmp_path: Path) -> None:
    archive = tmp_path / "env.tar.gz"
    archive.write_bytes(b"packed beforehand")
    args = build_parser().parse_args(["run", "--process", "m:f", "--ship-env", str(archive)])
    with shipped_env(args.ship_env, "client") as extra:
        cmd = build_command(args, "spark-submit", None, extra)
    at = cmd.index("--archives")
    assert cmd[at + 1] == f"{archive}#environment"
    assert at < cmd.index(str(job_file()))
    assert archive.exists()  # an archive given is the user's: left in place


def test_a_dry_run_packs_nothing_and_an_unknown_archive_is_an_error(tmp_path: Path) -> None:
    with shipped_env("-", "client", dry_run=True) as extra:
        assert extra[0] == "--archives" and extra[1].endswith(".tar.gz#environment")
        assert not Path(extra[1].partition("#")[0]).exists()
    with pytest.raises(ShipEnvError, match="no such archive"), shipped_env("nope.tgz", "client"):
        pass
    with shipped_env(None, "client") as extra:
        assert extra == []


def test_packing_needs_a_virtualenv_and_says_so(tmp_path: Path) -> None:
    with pytest.raises(ShipEnvError, match="run kinesis-spout from a virtualenv"):
        pack_virtualenv(tmp_path, tmp_path / "out")


def test_without_venv_pack_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "venv_pack", None)  # import venv_pack fails
    with pytest.raises(ShipEnvError, match=r"venv-pack \(the 'ship' extra\): pip install"):
        pack_virtualenv(Path(sys.prefix), Path("unused"))


WORKER_FAILED = "\n".join(
    [
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.",
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 failed",
        "Error from python worker:",
        "  /opt/py/bin/python: Error while finding module specification for "
        "'kinesis_spout.spark.launch.worker_daemon' (ModuleNotFoundError: No module named "
        "'kinesis_spout')",
        "PYTHONPATH was:",
        "  /opt/spark/python/lib/pyspark.zip",
        "org.apache.spark.SparkException: EOFException occurred while reading the port number",
    ]
)
"""What the driver got from a job whose executors' Python (Spark 4) had no kinesis_spout."""


def test_a_job_failed_by_executors_without_the_package_is_one_line_naming_the_flag() -> None:
    error = missing_on_executors(RuntimeError(WORKER_FAILED))
    assert error is not None
    assert str(error) == (
        "the executors' Python (/opt/py/bin/python) cannot import kinesis_spout: pass "
        "--ship-env to kinesis-spout run (it ships this virtualenv), or install kinesis-spout "
        "there (docs/deploy.md)"
    )
    # Spark 3.5 keeps the daemon's stderr in the executor's log: the port error alone.
    daemon = "EOFException occurred while reading the port number from "
    only = missing_on_executors(RuntimeError(daemon + "kinesis_spout.spark.launch.worker_daemon"))
    assert only is not None and "cannot import kinesis_spout: pass --ship-env" in str(only)
    assert missing_on_executors(RuntimeError("No module named 'mylib'")) is None
    assert missing_on_executors(RuntimeError("ValueError: poison record")) is None


def test_the_flag_alone_packs_this_virtualenv_and_with_a_value_names_an_archive() -> None:
    parse = build_parser().parse_args
    assert parse(["run", "--ship-env"]).ship_env == PACK_NOW
    assert parse(["run", "--ship-env", "env.tar.gz"]).ship_env == "env.tar.gz"
    assert parse(["run"]).ship_env is None
