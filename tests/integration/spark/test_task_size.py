"""Hole 9: a 10,000-record micro-batch makes no Spark task of "very large size".

PySpark ships a local Arrow table inside its tasks (at most defaultParallelism of
them) and Spark warns about any task over 1000 KiB: on local[2] every 10k-record
micro-batch of 200-byte records was two ~1.3 MB tasks, and the job's log showed
"Stage N contains a task of very large size" at every batch.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import spark_job_helpers

from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]


def test_a_job_with_10k_record_batches_logs_no_large_task_warning(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, make_payloads(20_000, 200))
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("kinesis-spout")),
            "run",
            "--process",
            f"{spark_job_helpers.__file__}:accept",
            "--spark-conf",
            "spark.ui.enabled=false",
            "--stream-name",
            unique_name,
            "--job-name",
            unique_name,
            "--endpoint-url",
            moto_server.endpoint_url,
            "--checkpoint-store",
            f"file://{tmp_path / 'checkpoints'}",
            "--dead-letter",
            str(tmp_path / "dead-letter"),
            "--batch-size",
            "10000",
            "--batch-max-wait",
            "5",
            "--stop-when-idle",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "20000 done" in out, out[-3000:]
    assert "task of very large size" not in out, out[-3000:]
