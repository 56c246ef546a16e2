"""StartupTimes: each phase is the time since the previous mark, said once; and the
warm-up of the executors (with a stand-in SparkContext: only the order of things)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from kinesis_spout.config import SpoutConfig
from kinesis_spout.spark.launch.startup import WARM_GROUP, StartupTimes, warm_executors
from kinesis_spout.spark.read.plan import ReadSettings

_SETTINGS = ReadSettings.of(SpoutConfig(stream_name="s"))


def test_phases_are_the_times_between_marks_and_the_line_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [10.0]
    times = StartupTimes(started=9.5, clock=lambda: now[0])
    times.mark("imports")
    now[0] = 12.25
    times.mark("spark session")
    now[0] = 12.5
    with caplog.at_level(logging.DEBUG, logger="kinesis_spout.spark.launch.startup"):
        times.finish("first micro-batch")
        now[0] = 20.0
        times.finish("again")
        times.mark("later")
    assert times.phases == [("imports", 0.5), ("spark session", 2.25), ("first micro-batch", 0.25)]
    assert times.total == 3.0
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "startup: imports 0.50s | spark session 2.25s | first micro-batch 0.25s | total 3.00s"
    ]


class _Context:
    defaultParallelism = 2

    def __init__(self) -> None:
        self.groups: list[str] = []
        self.jobs = threading.Event()

    def setJobGroup(self, group: str, description: str) -> None:  # noqa: N802 - Spark's name
        self.groups.append(group)

    def parallelize(self, data: object, slices: int) -> _Context:
        return self

    def foreachPartition(self, fn: object) -> None:  # noqa: N802 - Spark's name
        self.jobs.set()


def _spark(sc: _Context) -> Any:
    return type("Spark", (), {"sparkContext": sc})()


def test_a_failure_to_ship_the_process_file_reaches_the_caller_and_nothing_warms() -> None:
    sc = _Context()

    def ship() -> None:
        raise OSError("no such file: job.py")

    shipped = warm_executors(_spark(sc), _SETTINGS, (), before=ship)
    with pytest.raises(OSError, match="job.py"):
        shipped.result(timeout=10)
    assert not sc.jobs.wait(0.2) and sc.groups == []


def test_the_warm_up_job_runs_in_its_own_group_once_the_file_is_shipped() -> None:
    sc = _Context()
    shipped = warm_executors(_spark(sc), _SETTINGS, ())
    assert shipped.result(timeout=10) is None
    assert sc.jobs.wait(10) and sc.groups == [WARM_GROUP]


@pytest.mark.parametrize("quiet", [False, True])
def test_a_dropped_accumulator_connection_is_one_log_line_not_a_traceback(
    quiet: bool, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """PySpark's own accumulator server, its connection cut by the peer after the token
    (what a stopping JVM does): without the job's handler it prints a traceback."""
    import socket
    import types

    from pyspark import accumulators

    from kinesis_spout.spark.launch.startup import quiet_accumulator_errors

    server = accumulators._start_update_server("token-1234", False, None)
    try:
        if quiet:
            quiet_accumulator_errors(
                types.SimpleNamespace(sparkContext=types.SimpleNamespace(_accumulatorServer=server))
            )
        handled = threading.Event()
        handle_error = server.handle_error

        def observed(request: Any, address: Any) -> None:
            handle_error(request, address)
            handled.set()

        server.handle_error = observed
        with caplog.at_level(logging.INFO, logger="kinesis_spout.spark.launch.startup"):
            with socket.create_connection(server.server_address[:2], timeout=5) as conn:
                conn.sendall(b"token-1234")
            assert handled.wait(10)
    finally:
        server.shutdown()
    err = capfd.readouterr().err
    if quiet:
        assert "Traceback" not in err, err
        assert "accumulator connection closed (EOFError)" in caplog.text
    else:
        assert "Traceback" in err and "EOFError" in err


def test_the_background_imports_then_call_the_warm_up_and_a_failing_one_is_only_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import sys

    from kinesis_spout.spark.launch.startup import import_in_background

    seen: list[bool] = []

    def then() -> None:  # runs after the imports
        seen.append("kinesis_spout.spark.read.frames" in sys.modules)
        raise OSError("no endpoint")

    with caplog.at_level(logging.DEBUG, logger="kinesis_spout.spark.launch.startup"):
        import_in_background("kinesis_spout.spark.read.frames", then=then).join(30)
    assert seen == [True]
    assert "failed in the background" in caplog.text


def test_warm_client_loads_the_model_the_spout_s_client_then_finds() -> None:
    from kinesis_spout.kinesis import client as clients
    from kinesis_spout.spark.job import warm_client

    config = SpoutConfig(stream_name="s", endpoint_url="http://127.0.0.1:9", region="eu-west-1")
    loader = clients._session(config.profile)._session.get_component("data_loader")
    loader._cache.clear()  # as in a new process
    warm_client(config)  # makes a client (no call), as the spout will
    loaded = [key for key in loader._cache if key[:2] == ("load_service_model", "kinesis")]
    assert loaded  # the spout's client finds botocore's model of Kinesis loaded
