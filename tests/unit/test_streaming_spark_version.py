"""The Structured Streaming source needs Spark 4.0 (its Python Data Source API) and says so
in one line on Spark 3.5, where the Spark job runs (scripts/test.sh runs this file on
PySpark 3.5 as well: marker ``spark35``)."""

from __future__ import annotations

import importlib

import pyspark
import pytest

from kinesis_spout.streaming.errors import MissingDependencyError

pytestmark = pytest.mark.spark35


def test_the_streaming_source_needs_spark_4_and_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    version = pyspark.__version__
    if int(version.split(".")[0]) >= 4:
        source = importlib.import_module("kinesis_spout.streaming.source")
        assert source.KinesisDataSource.name() == "kinesis"
        version = "3.5.9"
        monkeypatch.setattr(pyspark, "__version__", version)  # as a 3.5 installation
        with pytest.raises(MissingDependencyError) as raised:
            source.check_dependencies()
    else:
        with pytest.raises(MissingDependencyError) as raised:
            from kinesis_spout.streaming import register  # noqa: F401
    assert str(raised.value) == (
        "the kinesis streaming source needs Spark 4.0 or newer (its Python Data Source API), "
        f"this is PySpark {version}: run it on Spark 4, or run the Spark job "
        "(kinesis-spout run), which runs on Spark 3.5 as well"
    )
