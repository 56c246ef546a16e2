"""bench/spark_bench.py --shards: reading the job's lines, the process tree's CPU time, and
the shard counts flag, the emulator's CPU traced beside a run and the read floor (the bench
itself runs Spark; these parts do not)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kit import spout_config

from kinesis_spout.spark.job import describe
from kinesis_spout.spark.reports import BatchReport, JobSummary
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, put_records

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import job_runs  # noqa: E402
import proctree  # noqa: E402
import read_floor  # noqa: E402
import spark_idle  # noqa: E402
import spark_shards  # noqa: E402


def _report(batch_id: int, ok: int, seconds: float) -> str:
    r = BatchReport(batch_id, ok, ok, 0, 0, 0, 0, 0, 0, 1.5, seconds, seconds)
    return r.line() + "\n"


def _run(lines: list[tuple[float, str]]) -> job_runs.JobRun:
    return job_runs.JobRun(
        [line for _, line in lines], [t for t, _ in lines], 0.0, None, None, None, 30.0, 1.0, None
    )


def test_the_figures_come_from_the_job_s_own_lines() -> None:
    summary = JobSummary(3, 9_000, 9_000, 0, 0, 0, 12.0, "idle for 0.5s", busy_seconds=4.0)
    run = _run(
        [
            (7.0, "INFO kinesis_spout.spout: opened stream s (ACTIVE) at x: 4 shards\n"),
            (10.0, describe(spout_config(), "f.py:process") + "\n"),
            (12.0, _report(0, 1_000, 2.0)),
            (13.0, "WARN something else\n"),
            (14.0, _report(1, 4_000, 2.0)),
            (16.0, _report(2, 4_000, 0.001)),
            (17.0, summary.line() + "\n"),
        ]
    )
    assert run.records_per_second == pytest.approx(summary.done_per_second, rel=1e-3)
    assert int(run.summary()["done"]) == 9_000
    assert [d for _, d in run.batches()] == [1_000, 4_000, 4_000]
    assert run.warm_records_per_second() == pytest.approx(8_000 / 4.0)  # lines at 12 -> 16 s
    # From the banner (the Spark session is up) at 10 s: the stream opened while it started.
    assert run.wall_records_per_second() == pytest.approx(9_000 / 6.0)


def test_a_micro_batch_s_window_ends_at_its_line_and_lasts_its_records_over_its_rate() -> None:
    run = _run([(12.0, _report(0, 1_000, 2.0)), (20.0, _report(1, 4_000, 0.5))])
    assert run.batch_windows() == [
        pytest.approx((10.0, 12.0), abs=1e-3),
        pytest.approx((19.5, 20.0), abs=1e-3),
    ]


def test_the_emulator_s_busy_share_is_its_cpu_over_the_micro_batches() -> None:
    trace = proctree.CpuTrace(lambda: None)
    trace.times, trace.cpu = [0.0, 10.0, 20.0], [0.0, 10.0, 12.0]
    assert trace.between(5.0, 10.0) == pytest.approx(5.0)  # interpolated inside a gap
    assert trace.between(-1.0, 30.0) == pytest.approx(12.0)  # outside: the ends
    # 4 s of windows: 2 s at a core (2.0 CPU), 2 s at a fifth (0.4)
    assert spark_shards.cores_busy(trace, [(6.0, 8.0), (12.0, 14.0)]) == 0.6
    assert spark_shards.cores_busy(trace, []) is None


SPIN = """
import time
end = time.process_time() + 0.5
while time.process_time() < end:
    pass
print("spun", flush=True)
time.sleep(30)
"""


def test_a_cpu_trace_follows_a_process_as_it_runs() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
    try:
        with proctree.CpuTrace(proctree.process_cpu(proc.pid), interval=0.02) as trace:
            assert proc.stdout is not None and proc.stdout.readline() == "spun\n"
        # the half second it spun, less what its start cost before the first sample
        assert 0.4 <= trace.between(trace.times[0], trace.times[-1]) <= 1.0
        assert trace.times == sorted(trace.times)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("empty", [0, 2])
def test_the_micro_batches_that_read_nothing_are_micro_batches_too(empty: int) -> None:
    summary = JobSummary(3, 9_000, 9_000, 0, 0, 0, 12.0, "idle", empty_batches=empty)
    line = summary.line()
    assert ("read nothing" in line) == bool(empty)
    run = _run([(1.0, _report(0, 9_000, 2.0)), (2.0, line + "\n")])
    assert run.micro_batches() == 3 + empty
    assert int(run.summary()["done"]) == 9_000


def test_without_a_summary_line_the_run_says_what_it_printed() -> None:
    run = _run([(1.0, "Traceback (most recent call last):\n")])
    with pytest.raises(RuntimeError, match="(?s)no summary line.*Traceback"):
        run.summary()
    assert run.warm_records_per_second() is None and run.wall_records_per_second() is None


def test_descendants_are_the_tree_below_the_root() -> None:
    procs = {
        p: proctree.ProcSample(p, parent, "1", 0.0, 0.0)
        for p, parent in ((10, 1), (11, 10), (12, 11), (13, 10), (20, 1))
    }
    assert sorted(s.pid for s in proctree.descendants(10, procs)) == [10, 11, 12, 13]


BURN = """
import os, signal, sys, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # as PySpark's worker daemon: kernel-reaped
if os.fork() == 0:
    burn(0.6)
    os._exit(0)
burn(0.3)
time.sleep(1.5)
"""


def test_the_tree_s_cpu_counts_children_reaped_by_nobody() -> None:
    proc = subprocess.Popen([sys.executable, "-c", BURN])
    with proctree.TreeCpu(proc.pid, interval=0.05) as cpu:
        proc.wait(30)
    # rusage alone sees the child's 0.3 s (and its start), not the grandchild's 0.6 s
    assert 0.85 <= cpu.seconds <= 2.0


def test_the_machine_s_busy_cpu_grows_while_a_process_spins() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
    try:
        with proctree.CpuTrace(proctree.machine_cpu, interval=0.02) as trace:
            assert proc.stdout is not None and proc.stdout.readline() == "spun\n"
        # at least the half second it spun (other processes may add to it)
        assert trace.between(trace.times[0], trace.times[-1]) >= 0.4
    finally:
        proc.kill()
        proc.wait()


def test_shard_counts_are_sorted_and_checked() -> None:
    assert spark_shards.shard_counts("128,4,32") == [4, 32, 128]
    for bad in ("4", "0,4", "4,x"):
        with pytest.raises(argparse.ArgumentTypeError):
            spark_shards.shard_counts(bad)


def test_every_spark_job_start_in_the_event_logs_is_counted(tmp_path: Path) -> None:
    start = '{"Event":"SparkListenerJobStart","Job ID":%d,"Properties":{%s}}'
    lines = [
        start % (1, '"spark.jobGroup.id":"kinesis-spout-abc-1"'),
        start % (2, ""),
        '{"Event":"SparkListenerJobEnd","Job ID":1}',
    ]
    (tmp_path / "app").write_text("\n".join(lines) + "\n")
    assert job_runs.count_job_starts(tmp_path) == 2


def test_the_median_run_gives_a_shard_count_s_figures() -> None:
    runs = [{"rps": r, "batches": b} for r, b in ((7_000.4, 2), (5_000.0, 4), (9_000.0, 1))]
    assert spark_shards.median_run(runs) == {
        "rps": 7_000.4,
        "batches": 2,
        "rps_runs": [7_000, 5_000, 9_000],
    }
    two = spark_shards.median_run(runs[:2])  # an even count: the lower middle
    assert two["rps"] == 5_000.0 and two["batches"] == 4


def test_a_style_s_driver_cpu_is_the_median_of_its_runs_after_a_warm_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import spark_scale

    measured = iter([9.0, 2.5, 1.5, 2.0, 7.0, 1.0, 1.2, 1.1])  # each style: warm-up first
    monkeypatch.setattr(spark_scale, "style_cpu_run", lambda *a: next(measured))
    styles = {"fanout": ("words", None, 10), "transform": ("data", None, 10)}
    out = spark_scale.style_cpu_figures(None, "http://x", Path("."), styles)
    assert out == {
        "driver_cpu_us_per_record_fanout": 2.0,
        "driver_cpu_us_per_record_fanout_runs": [2.5, 1.5, 2.0],
        "driver_cpu_us_per_record_transform": 1.1,
        "driver_cpu_us_per_record_transform_runs": [1.0, 1.2, 1.1],
    }


def _figures(**measured: Any) -> dict[str, Any]:
    """``figures`` of runs at 4 and 128 shards (every run's figures alike but these)."""

    def data(rps: float) -> dict[str, float]:
        keys = ("rps", "rps_wall", "rps_warm")
        return {k: rps for k in keys} | {"spark_jobs": 4, "batches": 4, "batches_with_records": 3}

    idle = job_runs.JobRun([], [], 0.0, None, 5.0, 25.0, 26.0, 10.0, 4.0)
    defaults: dict[str, Any] = {
        "data": {4: data(8000), 128: data(6400)},
        "boto3": {4: [20_000.0], 128: [10_000.0]},
        "floor": {4: [20_000.0], 128: [16_000.0]},
        "idle": [{4: idle, 128: idle}],
        "startup_job": [13.0],
        "startup_bare": [12.0],
        "styles": {},
    }
    args = argparse.Namespace(shards=[4, 128], records=40_000, size=200, rounds=1)
    out: dict[str, Any] = spark_shards.figures(args, spark_shards.Measured(**(defaults | measured)))
    return out


def test_the_start_up_overhead_is_the_median_of_each_job_run_less_its_own_bare_run() -> None:
    out = _figures(
        startup_job=[13.7, 13.7, 12.1],
        startup_bare=[11.4, 13.6, 12.1],  # the bare run moves by more than the job's share
    )
    assert out["startup_overhead_s_runs"] == [2.3, 0.1, 0.0]
    assert out["startup_overhead_s"] == 0.1  # each pair at its own hour
    assert out["startup_overhead_of_medians_s"] == 1.6  # 13.7 against 12.1: other pairs
    assert out["shards_128_vs_4"] == 0.8


def test_the_boto3_loop_s_shard_ratio_is_of_its_own_median_runs() -> None:
    out = _figures(boto3={4: [20_000.0, 24_000.0, 22_000.0], 128: [11_000.0, 9_900.0, 12_000.0]})
    assert out["boto3_rps_4"] == 22_000 and out["boto3_rps_runs_128"] == [11_000, 9_900, 12_000]
    assert out["boto3_shards_128_vs_4"] == 0.5  # 11,000 over 22,000
    assert out["shards_128_vs_4"] == 0.8  # the job's own ratio is apart


def test_the_job_s_shard_ratio_is_set_against_the_read_floor_s() -> None:
    out = _figures(floor={4: [20_000.0, 30_000.0, 25_000.0], 128: [16_000.0, 12_000.0, 15_000.0]})
    assert out["read_floor_rps_4"] == 25_000 and out["read_floor_rps_runs_128"] == [
        16_000,
        12_000,
        15_000,
    ]
    assert out["read_floor_128_vs_4"] == 0.6  # 15,000 over 25,000
    assert out["shards_128_vs_4"] == 0.8
    assert out["shards_128_vs_4_of_floor"] == 1.333  # the job scales better than its reads


def _idle(cpu: float, window_cpu: float) -> job_runs.JobRun:
    """An idle run: launched at 0, banner at 10, SIGTERM at 30, ended at 32."""
    return job_runs.JobRun([], [], 0.0, None, 10.0, 30.0, 32.0, cpu, window_cpu)


def test_the_idle_figure_is_the_median_of_pairs_of_runs_and_its_pair_gives_the_rest() -> None:
    # Per pair: (CPU at 128 - CPU at 4) / 124 shards / 20 s idle.
    pairs = [
        {4: _idle(10.0, 2.0), 128: _idle(34.8, 4.48)},  # 24.8 s more: 10 ms per shard-second
        {4: _idle(12.0, 2.0), 128: _idle(14.48, 2.0)},  # 2.48 s more: 1 ms
        {4: _idle(11.0, 3.0), 128: _idle(11.0, 3.0)},  # the same: 0 ms
    ]
    out = spark_idle.idle_figures(pairs)
    assert out["idle_cpu_ms_per_shard_s_runs"] == [10.0, 1.0, 0.0]
    assert out["idle_cpu_ms_per_shard_s"] == 1.0  # one run's start-up cannot set the figure
    assert out["idle_window_cpu_ms_per_shard_s_runs"] == [1.0, 0.0, 0.0]
    assert out["idle_window_cpu_ms_per_shard_s"] == 0.0
    assert (out["idle_cpu_s_4"], out["idle_cpu_s_128"]) == (12.0, 14.48)  # the median pair's
    assert out["idle_seconds"] == 20.0
    assert (out["idle_start_s_4"], out["idle_stop_s_128"]) == (10.0, 2.0)
    two = spark_idle.idle_figures(pairs[:2])  # an even count: the lower middle pair's runs
    assert two["idle_cpu_s_128"] == 14.48
    assert two["idle_cpu_ms_per_shard_s"] == 5.5  # the figure itself: the median


@pytest.mark.parametrize("bad", ["0", "-1", "two", ""])
def test_a_count_flag_below_one_or_not_a_number_is_refused_naming_the_value(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=repr(bad)):
        spark_shards.at_least_one(bad)
    assert spark_shards.at_least_one("3") == 3


def test_the_read_floor_reads_every_record_with_the_read_tasks_code(
    moto_server: MotoServer, moto_client: Any, unique_name: str
) -> None:
    create_stream(moto_client, unique_name, 5)
    put_records(moto_client, unique_name, [(f"k{i}", b"x" * 50) for i in range(300)])
    url = moto_server.endpoint_url
    assert read_floor.read_floor(moto_client, url, unique_name, 300) > 0
    with pytest.raises(RuntimeError, match=f"read 300 records of {unique_name}, expected 301"):
        read_floor.read_floor(moto_client, url, unique_name, 301)
