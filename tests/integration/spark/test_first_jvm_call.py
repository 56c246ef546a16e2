"""PySpark's first JVM call, made on its own before the job's background imports start
(``first_jvm_call``): it is where PySpark imports pandas, CPU on the main thread
that a session's ``getOrCreate`` would otherwise spend while those imports hold the GIL.

A fresh interpreter (nothing imported yet), under a real ``spark-submit`` (its JVM).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kinesis_spout.spark.launch.submit import find_spark_submit, job_environment
from kinesis_spout.testing.processes import free_port

pytestmark = pytest.mark.integration

SCRIPT = """
import sys
import pyspark.sql
from kinesis_spout.spark.launch.startup import first_jvm_call
before = {"pandas", "pyspark.testing.utils"} & set(sys.modules)
first_jvm_call()
after = {"pandas", "pyspark.testing.utils"} & set(sys.modules)
print("before", sorted(before), "after", sorted(after), flush=True)
"""


def run(cmd: list[str], **env: str) -> list[str]:
    """``cmd``'s output lines (it must exit 0), in the job's environment plus ``env``."""
    done = subprocess.run(
        cmd,
        env={**job_environment(), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()


def test_under_spark_submit_the_first_jvm_call_makes_the_imports_getorcreate_would(
    tmp_path: Path,
) -> None:
    script = tmp_path / "first_call.py"
    script.write_text(SCRIPT)
    said = run([find_spark_submit(), "--master", "local[1]", str(script)])[-1]
    # Neither PySpark's SQL module nor the job's import pandas; PySpark's first JVM call does.
    assert said == "before [] after ['pandas', 'pyspark.testing.utils']"


def test_without_spark_submit_it_starts_no_jvm_and_imports_nothing() -> None:
    assert run([sys.executable, "-c", SCRIPT])[-1] == "before [] after []"


def test_a_failed_first_call_is_only_logged_for_the_session_to_meet_again() -> None:
    """A spark-submit JVM that is not there (a port nothing listens on): the call only
    moves work earlier, so its failure is a DEBUG line and the job goes on to
    ``getOrCreate``, which reports the error itself."""
    script = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stdout)\n"
        "from kinesis_spout.spark.launch.startup import first_jvm_call\n"
        "first_jvm_call()\n"
        "print('went on', flush=True)\n"
    )
    said = run(
        [sys.executable, "-c", script],
        PYSPARK_GATEWAY_PORT=str(free_port()),
        PYSPARK_GATEWAY_SECRET="x",
    )
    assert any("PySpark's first JVM call failed; the session makes it" in ln for ln in said)
    assert said[-1] == "went on"
