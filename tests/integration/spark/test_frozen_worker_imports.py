"""A Python worker's imports are frozen out of the cyclic collector's scans
(:mod:`kinesis_spout.spark.worker_heap`): PySpark's daemon runs a full collection after
each task of a reused worker, and without the freeze it scans every module's objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spark_job_helpers import note_frozen_heap, words_noting_frozen_heap

from kinesis_spout.examples.wordcount import WordCountSink
from kinesis_spout.spark import build_driver, fan_out
from kinesis_spout.testing.streams import create_stream, put_records

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.mark.parametrize("style", ["per-record", "fan-out"])
def test_records_are_processed_in_workers_whose_imports_are_frozen(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, tmp_path: Path, style: str
) -> None:
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, [(f"k{i}", b"w%d x" % i) for i in range(40)])
    seen = tmp_path / "seen"
    seen.mkdir()
    if style == "per-record":
        process: Any = note_frozen_heap(str(seen))
    else:
        emit = words_noting_frozen_heap(str(seen))
        process = fan_out(emit, "word string", [WordCountSink(tmp_path / "c")], "words")

    summary = build_driver(job_config(), process, spark=spark, progress=None).run()

    assert summary.ok == 40
    frozen = [int(p.name.rsplit(".", 1)[1]) for p in seen.iterdir()]
    assert len({p.name.split(".")[0] for p in seen.iterdir()}) == 40
    assert min(frozen) > 0, f"a record ran where nothing was frozen: {sorted(frozen)}"
