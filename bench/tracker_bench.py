"""Benchmark: InflightRecordTracker against a sorted-set tracker in storm-kafka's style.

Usage: ``python bench/tracker_bench.py [--json] [--quick] [--cpu-time] [--plot FILE]``

Workload, for N = 1,000, 10,000 and 100,000 records in flight: emit N keys,
then ack them all (in emit order, or shuffled), reading ``checkpoint`` after
every ack batch of 1,000; repeat with fresh keys until about 1,000,000 records
are measured (10 rounds at 100,000).  In each trial every tracker does all the
rounds on one fresh instance, the trackers taking turns; each round is timed
alone (time.perf_counter) and its best over the trials is kept; a figure is
the sum over the rounds divided by the records.  The cyclic GC is enabled and
collected before each tracker's run, for all alike.  ``--cpu-time`` times
with time.process_time instead, steadier on a machine shared with other jobs.  Keys are real-sized
(56-digit) sequence numbers, created before timing; the trackers store no
payload (record None).

The baseline (``SortedSetTracker``) is what storm-kafka's PartitionManager
does: a sorted set of pending keys (``sortedcontainers.SortedList``); the
checkpoint is the predecessor of the smallest pending key (kept with a deque
of emitted keys, as Kinesis keys are not dense like Kafka offsets); a given-up
key is simply removed.  Its bulk path is the same loop with locals bound.

Memory: bytes per in-flight record with tracemalloc, 100,000 records emitted
and none acked, keys created before measuring (so not counted).

Figures are printed, never asserted. ``--plot FILE`` also draws them as a PNG bar chart
(needs matplotlib, the ``plots`` extra).
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sortedcontainers import SortedList  # noqa: E402

from devkit.plots import (  # noqa: E402
    Bar,
    BarChart,
    Panel,
    Series,
    add_plot_argument,
    check_plot_argument,
    finish_bench,
)
from tracker import Acker, InflightRecordTracker, SequenceKey  # noqa: E402

SIZES = (1_000, 10_000, 100_000)
BATCH = 1_000  # acks between two checkpoint reads
BASE_SEQUENCE = 49590338271490256608559692538361571095921575989136588898  # a real-sized one


class Tracker(Protocol):
    def emitted(self, key: SequenceKey, record: None = None, now: float = 0.0) -> bool: ...
    def ack(self, key: SequenceKey) -> object: ...
    def ack_many(self, keys: Iterable[SequenceKey]) -> object: ...
    @property
    def checkpoint(self) -> SequenceKey | None: ...


class SortedSetTracker:
    """storm-kafka PartitionManager's bookkeeping, for keys that are not dense."""

    __slots__ = ("_checkpoint", "_emitted", "_pending")

    def __init__(self) -> None:
        self._pending: SortedList = SortedList()
        self._emitted: deque[SequenceKey] = deque()  # emitted since the checkpoint, in order
        self._checkpoint: SequenceKey | None = None

    def emitted(self, key: SequenceKey, record: None = None, now: float = 0.0) -> bool:
        self._pending.add(key)
        self._emitted.append(key)
        return True

    def ack(self, key: SequenceKey) -> None:
        self._pending.discard(key)

    def give_up(self, key: SequenceKey) -> None:
        self._pending.discard(key)

    def ack_many(self, keys: Iterable[SequenceKey]) -> None:
        discard = self._pending.discard
        for key in keys:
            discard(key)

    @property
    def checkpoint(self) -> SequenceKey | None:
        pending = self._pending
        emitted = self._emitted
        if pending:
            first = pending[0]
            while emitted[0] < first:
                self._checkpoint = emitted.popleft()
        elif emitted:
            self._checkpoint = emitted[-1]
            emitted.clear()
        return self._checkpoint


Round = tuple[list[SequenceKey], list[list[SequenceKey]]]


def make_rounds(size: int, rounds: int, shuffle: bool, rng: random.Random) -> list[Round]:
    """Fresh increasing keys for every round, and the ack order cut into batches."""
    out: list[Round] = []
    sequence = BASE_SEQUENCE
    for _ in range(rounds):
        keys = []
        for _ in range(size):
            sequence += rng.randrange(1, 1000)
            keys.append(SequenceKey(sequence, 0))
        acks = keys[:]
        if shuffle:
            rng.shuffle(acks)
        out.append((keys, [acks[i : i + BATCH] for i in range(0, size, BATCH)]))
    return out


Clock = Callable[[], float]
Runner = Callable[[Tracker, list[Round], Clock], float]


def run_single(tracker: Tracker, rounds: list[Round], clock: Clock) -> float:
    emitted = tracker.emitted
    ack = tracker.ack
    start = clock()
    for keys, batches in rounds:
        for key in keys:
            emitted(key)
        for batch in batches:
            for key in batch:
                ack(key)
            tracker.checkpoint  # noqa: B018  (read once per batch, like the spout does)
    return clock() - start


def run_bulk(tracker: Tracker, rounds: list[Round], clock: Clock) -> float:
    emitted = tracker.emitted
    ack_many = tracker.ack_many
    start = clock()
    for keys, batches in rounds:
        for key in keys:
            emitted(key)
        for batch in batches:
            ack_many(batch)
            tracker.checkpoint  # noqa: B018
    return clock() - start


def best_of(
    trials: int,
    runners: dict[str, tuple[Callable[[], Tracker], Runner]],
    rounds: list[Round],
    clock: Clock,
) -> dict[str, float]:
    """Total time of each runner over all rounds, taking each round's best of ``trials``.

    In every trial each runner does all the rounds on one fresh tracker, the
    runners taking turns; each round is timed alone, so a burst of load from
    elsewhere spoils one round of one trial rather than a whole figure.
    """
    best = {name: [float("inf")] * len(rounds) for name in runners}
    last = rounds[-1][0][-1]
    for _ in range(trials):
        for name, (factory, run) in runners.items():
            tracker = factory()
            times = best[name]
            gc.collect()
            for index, one_round in enumerate(rounds):
                elapsed = run(tracker, [one_round], clock)
                if elapsed < times[index]:
                    times[index] = elapsed
            if tracker.checkpoint != last:
                raise AssertionError(f"{name}: checkpoint {tracker.checkpoint} != {last}")
            del tracker
    return {name: sum(times) for name, times in best.items()}


def ours() -> Tracker:
    return InflightRecordTracker(retry_limit=3)


def baseline() -> Tracker:
    return SortedSetTracker()


def bytes_per_inflight(factory: Callable[[], object], size: int) -> float:
    """tracemalloc'd bytes per in-flight record; the keys exist before measuring."""
    rng = random.Random(7)
    keys = make_rounds(size, 1, False, rng)[0][0]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracker = factory()
        emitted = tracker.emitted  # type: ignore[attr-defined]
        for key in keys:
            emitted(key, None, 0.0)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return used / size


def acker_bytes_per_root(roots: int) -> float:
    acker = Acker(rng=random.Random(1))
    ids = [(acker.new_id(), acker.new_id() | 1) for _ in range(roots)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for root, val in ids:
            acker.init(root, val, "owner")
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return used / roots


def label(size: int) -> str:
    return f"{size // 1000}k"


_CASES = tuple(
    Bar(f"{label(size)} {'in order' if order == 'inorder' else order}", f"{order}_{label(size)}")
    for size in SIZES
    for order in ("inorder", "random")
)
CHART = BarChart(
    "tracker_bench: emit + ack per record, in-flight tracker vs sorted set",
    (
        Panel(
            "one ack at a time",
            "µs per record (lower is better)",
            _CASES,
            (
                Series("in-flight tracker", "us_per_record_{}"),
                Series("sorted set (storm-kafka)", "sorted_us_per_record_{}", baseline=True),
            ),
        ),
        Panel(
            "bulk ack_many",
            "µs per record (lower is better)",
            _CASES,
            (
                Series("in-flight tracker", "bulk_us_per_record_{}"),
                Series("sorted set (storm-kafka)", "sorted_bulk_us_per_record_{}", baseline=True),
            ),
        ),
        Panel(
            "memory, 100k in flight",
            "bytes per in-flight record",
            (
                Bar("tracker", "bytes_per_inflight"),
                Bar("tracker + message timeout", "bytes_per_inflight_with_timeout"),
                Bar("sorted set", "sorted_bytes_per_inflight", baseline=True),
                Bar("acker (per open root)", "acker_bytes_per_root"),
            ),
        ),
    ),
    note="Python {python}, time.{clock}, best of {trials} trials; in flight: 1k = 1,000 records",
)
"""The chart ``--plot FILE`` draws."""


RUNNERS: dict[str, tuple[Callable[[], Tracker], Runner]] = {
    "ours": (ours, run_single),
    "sorted": (baseline, run_single),
    "ours_bulk": (ours, run_bulk),
    "sorted_bulk": (baseline, run_bulk),
}
"""Each tracker with one ack at a time and with ``ack_many``."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--quick", action="store_true", help="~10x fewer records, 2 trials")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with time.process_time instead of time.perf_counter (for a busy machine)",
    )
    add_plot_argument(parser)
    args = parser.parse_args(argv)
    check_plot_argument(parser, args.plot)
    return args


def time_case(
    size: int, order: str, target: int, trials: int, clock: Clock
) -> tuple[dict[str, float], int]:
    """µs per record of each runner at ``size`` in flight; and the records measured."""
    rounds_count = max(1, target // size)
    rounds = make_rounds(size, rounds_count, order == "random", random.Random(size))
    records = size * rounds_count
    best = best_of(trials, RUNNERS, rounds, clock)
    return {name: seconds / records * 1e6 for name, seconds in best.items()}, records


def case_figures(tag: str, us: dict[str, float], records: int) -> dict[str, object]:
    """The figures of one case (``inorder_10k`` ...) from :func:`time_case`."""
    return {
        f"us_per_record_{tag}": round(us["ours"], 4),
        f"sorted_us_per_record_{tag}": round(us["sorted"], 4),
        f"bulk_us_per_record_{tag}": round(us["ours_bulk"], 4),
        f"sorted_bulk_us_per_record_{tag}": round(us["sorted_bulk"], 4),
        f"ratio_vs_sorted_{tag}": round(us["sorted"] / us["ours"], 3),
        f"ratio_bulk_vs_sorted_{tag}": round(us["sorted_bulk"] / us["ours_bulk"], 3),
        f"records_measured_{tag}": records,
    }


def timing_figures(target: int, trials: int, clock: Clock) -> dict[str, object]:
    """Every size and order, one printed row each; their figures."""
    print(
        f"{'in flight':>10} {'order':>8} | {'ours':>8} {'sorted':>8} {'ratio':>6} |"
        f" {'ours bulk':>9} {'sorted bulk':>11} {'ratio':>6}   (us per record, emit+ack)"
    )
    figures: dict[str, object] = {}
    for size in SIZES:
        for order in ("inorder", "random"):
            us, records = time_case(size, order, target, trials, clock)
            figures.update(case_figures(f"{order}_{label(size)}", us, records))
            ratio = us["sorted"] / us["ours"]
            ratio_bulk = us["sorted_bulk"] / us["ours_bulk"]
            print(
                f"{size:>10,} {order:>8} | {us['ours']:>8.3f} {us['sorted']:>8.3f} {ratio:>5.2f}x |"
                f" {us['ours_bulk']:>9.3f} {us['sorted_bulk']:>11.3f} {ratio_bulk:>5.2f}x"
            )
        figures[f"ratio_vs_sorted_{label(size)}"] = figures[f"ratio_vs_sorted_random_{label(size)}"]
    return figures


def memory_figures(size: int) -> dict[str, object]:
    """Bytes per in-flight record (``size`` in flight) and per open acker root, printed."""
    ours_bytes = bytes_per_inflight(ours, size)
    timeout_bytes = bytes_per_inflight(
        lambda: InflightRecordTracker(retry_limit=3, message_timeout=30.0), size
    )
    sorted_bytes = bytes_per_inflight(baseline, size)
    acker_bytes = acker_bytes_per_root(size)
    print(
        f"memory at {size:,} in flight (tracemalloc, keys created before measuring): "
        f"{ours_bytes:.1f} B/record ours, {timeout_bytes:.1f} B with a message timeout, "
        f"{sorted_bytes:.1f} B sorted-set baseline; acker {acker_bytes:.1f} B/open root"
    )
    return {
        "bytes_per_inflight": round(ours_bytes, 1),
        "bytes_per_inflight_with_timeout": round(timeout_bytes, 1),
        "sorted_bytes_per_inflight": round(sorted_bytes, 1),
        "acker_bytes_per_root": round(acker_bytes, 1),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    clock: Clock = time.process_time if args.cpu_time else time.perf_counter
    target = 100_000 if args.quick else 1_000_000
    trials = 2 if args.quick else 5
    figures: dict[str, object] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "batch": BATCH,
        "trials": trials,
        "gc_enabled": gc.isenabled(),
        "clock": clock.__name__,
    }
    print(
        f"tracker_bench: Python {platform.python_version()}, time.{clock.__name__}, best of"
        f" {trials} trials, checkpoint read every {BATCH} acks, GC enabled for both,"
        " keys pre-created"
    )
    figures.update(timing_figures(target, trials, clock))
    figures.update(memory_figures(SIZES[-1]))
    return finish_bench(CHART, figures, args.plot, args.json, sort_keys=True)


if __name__ == "__main__":
    sys.exit(main())
