"""The idle figures of ``spark_bench.py --shards`` (:mod:`spark_shards`): the job on an
empty stream of the smallest and the largest shard count, in alternated pairs of runs.

See :mod:`spark_shards`'s docstring for what each figure is and why it takes pairs.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import job_runs
from job_runs import JobRun


def idle_run(endpoint: str, tmp: Path, shards: int, seconds: float) -> JobRun:
    workdir = job_runs.job_dir(tmp, f"idle-{shards}")
    toml = job_runs.write_job(workdir, f"empty-{shards}", endpoint, stop_when_idle=0.0)
    return job_runs.run_job(toml, stop_after=seconds)


def idle_pairs(
    endpoint: str, tmp: Path, ends: tuple[int, int], seconds: float, pairs: int
) -> list[dict[int, JobRun]]:
    """``pairs`` pairs of idle runs, each a run at ``ends[0]`` shards then one at
    ``ends[1]``, each printed as it ends."""
    idle: list[dict[int, JobRun]] = []
    for i in range(pairs):
        idle.append({})
        for s in ends:
            idle[-1][s] = run = idle_run(endpoint, tmp, s, seconds)
            print(
                f"idle {i + 1}, {s:>4} shards: {run.cpu_seconds:.1f} s CPU in "
                f"{run.wall_seconds:.1f} s wall (launch to exit; Spark session up after "
                f"{(run.banner or run.ended) - run.launched:.1f} s, exited "
                f"{run.ended - (run.stopped or run.ended):.1f} s after SIGTERM); "
                f"{run.window_cpu_seconds or 0:.1f} s CPU in the {window_seconds(run):.1f} s "
                "idle window"
            )
        tree, window = idle_per_shard(idle[-1])
        print(f"idle {i + 1}: {tree:.2f} ms CPU per shard-second (idle window only {window:.2f})")
    return idle


def idle_per_shard(pair: dict[int, JobRun]) -> tuple[float, float]:
    """Of one pair of idle runs (smallest and largest count): ms of CPU per shard-second,
    from the whole runs' CPU and from their idle windows' only."""
    lo, hi = min(pair), max(pair)
    seconds = statistics.mean(window_seconds(run) for run in pair.values())
    tree = pair[hi].cpu_seconds - pair[lo].cpu_seconds
    cores = [(pair[s].window_cpu_seconds or 0.0) / window_seconds(pair[s]) for s in (lo, hi)]
    return 1000 * tree / (hi - lo) / seconds, 1000 * (cores[1] - cores[0]) / (hi - lo)


def idle_figures(pairs: list[dict[int, JobRun]]) -> dict[str, Any]:
    """The idle figures of the module docstring: the medians of the pairs', and the
    median pair's runs (the lower middle of an even count)."""
    per = [idle_per_shard(pair) for pair in pairs]
    ranked = sorted(range(len(pairs)), key=lambda i: per[i][0])
    pair = pairs[ranked[(len(ranked) - 1) // 2]]
    out: dict[str, Any] = {}
    for s, run in pair.items():
        window = window_seconds(run)
        out[f"idle_cpu_s_{s}"] = round(run.cpu_seconds, 2)
        out[f"idle_wall_s_{s}"] = round(run.wall_seconds, 1)
        out[f"idle_window_s_{s}"] = round(window, 2)
        out[f"idle_window_cpu_s_{s}"] = round(run.window_cpu_seconds or 0.0, 2)
        out[f"idle_cores_{s}"] = round((run.window_cpu_seconds or 0.0) / window, 3)
        out[f"idle_start_s_{s}"] = round((run.banner or run.ended) - run.launched, 1)
        out[f"idle_stop_s_{s}"] = round(run.ended - (run.stopped or run.ended), 1)
    out["idle_seconds"] = round(statistics.mean(window_seconds(r) for r in pair.values()), 2)
    out["idle_cpu_ms_per_shard_s"] = round(statistics.median(t for t, _ in per), 2)
    out["idle_cpu_ms_per_shard_s_runs"] = [round(t, 2) for t, _ in per]
    out["idle_window_cpu_ms_per_shard_s"] = round(statistics.median(w for _, w in per), 2)
    out["idle_window_cpu_ms_per_shard_s_runs"] = [round(w, 2) for _, w in per]
    return out


def window_seconds(run: JobRun) -> float:
    """Seconds from the job's banner (its Spark session is up) to our SIGTERM."""
    return (run.stopped or run.ended) - (run.banner or run.launched)
