"""A fan-out's read tasks report their emit rows with their task results, so a
micro-batch whose sinks all wrote everything settles with no statuses' Spark job; when
the reports are not whole or do not agree, the statuses' job settles as without them.

Real Spark (``local[2]``), moto over HTTP. The Spark jobs of a micro-batch are those
:meth:`FrameJobs.collect` counts: with reports, the sinks' own jobs only.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_job_helpers import (
    failing_word_sink,
    frame_jobs,
    split_unless_flagged,
    words_with_a_bad_one,
)

from kinesis_spout.config import InitialPosition
from kinesis_spout.examples.wordcount import (
    WordCountSink,
    is_poison,
    sample_records,
    split_sentence,
)
from kinesis_spout.records import GetterPosition
from kinesis_spout.spark import fan_out
from kinesis_spout.spark.plan import ReadPlan, ReadResult
from kinesis_spout.spark.read.emit_reports import EmitReports
from kinesis_spout.spark.read.frames import RECOMPUTED
from kinesis_spout.testing.streams import create_stream, put_records, shard_ids

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]

OLDEST = GetterPosition(None, None, True, InitialPosition.TRIM_HORIZON, None)
LATEST = GetterPosition(None, None, True, InitialPosition.LATEST, None)


def read_stream(
    spark: Any, client: Any, cfg: Any, stream: str, process: Any, run: str
) -> tuple[list[ReadResult], int]:
    """Every shard of ``stream`` read from its start in one micro-batch of two read tasks,
    processed by ``process``: the results and the Spark jobs it took."""
    frames, settings = frame_jobs(spark, cfg, stream, process)
    try:
        shards = sorted(shard_ids(client, stream))
        plans = [ReadPlan(i, stream, s, OLDEST, 500) for i, s in enumerate(shards)]
        return frames.collect(plans, 2, settings, run, 1)
    finally:
        frames.close()


def outcome(results: list[ReadResult]) -> dict[str, tuple[bool, str | None]]:
    """Per record (``shard:sequence``): ok, and its error."""
    return {
        f"{res.shard_id}:{seq}": (bool(res.ok[i]), res.errors.get(i))
        for res in results
        for i, seq in enumerate(res.seqs)
    }


def payloads(results: list[ReadResult]) -> list[tuple[str, bytes, int]]:
    """The failed records' payloads the results carry (for retries and dead letters)."""
    return sorted((r.message_id, r.data, r.attempt) for res in results for r in res.failed.values())


def ends(results: list[ReadResult]) -> list[tuple[Any, ...]]:
    """Where each plan's read ended: its shard, its last record, records taken, at tip."""
    return [
        (r.shard_id, r.end.last, r.end.taken, r.end.caught_up) if r.end else (r.shard_id,)
        for r in results
    ]


class KeepWords:
    """A sink that reads every derived record and says it wrote them."""

    name = "keep"

    def __call__(self, derived: Any) -> None:
        derived.toArrow()


def test_a_word_count_batch_settles_from_the_reports_as_the_statuses_job_settles_it(
    spark: Any,
    moto_client: Any,
    job_config: Any,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    items = sample_records(0, 300)  # one in 50 poison: its emit raises
    create_stream(moto_client, unique_name, 3)
    put = put_records(moto_client, unique_name, items)
    process = fan_out(split_sentence, "word string", [WordCountSink(tmp_path / "c")], "wc")
    cfg = job_config()

    reported, jobs = read_stream(spark, moto_client, cfg, unique_name, process, "with-reports")
    monkeypatch.setattr(EmitReports, "take", lambda self, key, tasks: None)
    collected, jobs_then = read_stream(spark, moto_client, cfg, unique_name, process, "without")
    assert (jobs, jobs_then) == (2, 3)  # the sink's and payloads'; the statuses' too

    got = outcome(reported)
    assert got == outcome(collected)
    assert payloads(reported) == payloads(collected)
    assert sorted(got) == sorted(f"{s}:{q}" for s, q in put)
    failed = {k for k, (ok, _) in got.items() if not ok}
    assert failed == {f"{put[i][0]}:{put[i][1]}" for i, (_, d) in enumerate(items) if is_poison(d)}
    assert all(got[k][1] for k in failed)  # each with the emit's error
    assert ends(reported) == ends(collected)


class ReadsPart:
    """A sink that reads one derived record and says it wrote everything."""

    name = "part"

    def __call__(self, derived: Any) -> None:
        derived.take(1)


@pytest.mark.parametrize("sink", ["returns statuses", "reads part"])
def test_a_sink_that_returns_statuses_or_reads_part_settles_in_the_statuses_job(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, sink: str
) -> None:
    items = [(f"k{i}", b"alpha beta" if i % 3 else b"alpha bad gamma") for i in range(60)]
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, items)
    words = failing_word_sink("bad") if sink == "returns statuses" else ReadsPart()
    # with no cache, ``take(1)`` computes one read task only: its reports are not whole
    process = fan_out(words_with_a_bad_one, "word string", [words], "words")

    results, jobs = read_stream(spark, moto_client, job_config(), unique_name, process, "r")
    got = outcome(results)
    assert len(got) == 60
    failed = sum(not ok for ok, _ in got.values())
    assert failed == (20 if sink == "returns statuses" else 0)
    assert jobs >= 2  # the sink's, the statuses' (and the payloads' when records failed)


class TwiceAndFlag:
    """A sink that reads the derived records twice, its cache dropped in between (the
    read tasks run again), creating ``flag`` first if given; it wrote everything."""

    name = "twice"

    def __init__(self, spark: Any, flag: Path | None) -> None:
        self.spark = spark
        self.flag = flag

    def __call__(self, derived: Any) -> None:
        derived.toArrow()
        if self.flag is not None:
            self.flag.touch()
        self.spark.catalog.clearCache()
        derived.toArrow()


@pytest.mark.parametrize("emit_changes", [False, True])
def test_a_read_task_computed_again_reports_again_and_reports_that_differ_are_not_used(
    spark: Any,
    moto_client: Any,
    job_config: Any,
    unique_name: str,
    tmp_path: Path,
    emit_changes: bool,
) -> None:
    """The read tasks run twice within the sinks. The same rows reported twice settle
    from the reports; an ``emit`` that fails records the second time makes the reports
    disagree, and the statuses' job settles from the records as computed then."""
    items = [(f"k{i}", b"odd one" if i % 2 else b"even one") for i in range(40)]
    create_stream(moto_client, unique_name, 2)
    put_records(moto_client, unique_name, items)
    flag = tmp_path / "flag"
    sink = TwiceAndFlag(spark, flag if emit_changes else None)
    calls = tmp_path / "calls"
    emit = split_unless_flagged(str(flag), str(calls))
    process = fan_out(emit, "word string", [sink, KeepWords()], "flagged")

    results, jobs = read_stream(spark, moto_client, job_config(), unique_name, process, "r")
    got = outcome(results)
    assert len(got) == 40
    evaluations = Counter(calls.read_text().split())
    assert set(evaluations) == set(got)
    assert min(evaluations.values()) >= 2  # every record's task ran twice, at least
    failed = [error for ok, error in got.values() if not ok]
    if emit_changes:
        assert jobs == 2 + 1 + 1  # the sinks', the statuses', the payloads'
        assert len(failed) == 20 and all("flagged: odd" in (e or "") for e in failed)
    else:
        assert jobs == 2  # the sinks' only
        assert failed == []


def test_a_batch_read_first_settles_from_the_reports_without_its_ends_again(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    """A shard last seen at its tip is read first (its ends alone, a Spark job that also
    computes the read tasks) and processed only if it read something: that processing
    settles from the reports of the read-first job."""
    create_stream(moto_client, unique_name, 1)
    (shard,) = shard_ids(moto_client, unique_name)
    process = fan_out(words_with_a_bad_one, "word string", [KeepWords()], "words")
    frames, settings = frame_jobs(spark, job_config(), unique_name, process)
    try:
        first = ReadPlan(1, unique_name, shard, LATEST, 500)
        (at_tip,), _ = frames.collect([first], 1, settings, "r", 1)
        assert len(at_tip) == 0 and at_tip.end is not None and at_tip.end.caught_up
        put = put_records(moto_client, unique_name, [(f"k{i}", b"a b c") for i in range(30)])
        again = ReadPlan(2, unique_name, shard, at_tip.end.position, 500)
        (read,), jobs = frames.collect([again], 1, settings, "r", 2)
    finally:
        frames.close()
    assert jobs == 2  # the ends first, then the sink's
    assert read.seqs == [seq for _, seq in put] and all(read.ok)


class CacheSpy:
    """A sink that notes whether the session caches anything when it runs (the read
    stage, persisted or not), then writes every derived record, or, from micro-batch
    ``statuses_from`` on, returns a status per derived record instead."""

    name = "spy"

    def __init__(self, spark: Any, statuses_from: int) -> None:
        self.spark = spark
        self.statuses_from = statuses_from
        self.cached: list[bool] = []

    def __call__(self, derived: Any) -> Any:
        from pyspark.sql import functions as F

        cache = self.spark._jsparkSession.sharedState().cacheManager()
        self.cached.append(not cache.isEmpty())
        if len(self.cached) >= self.statuses_from:
            return derived.select("_root", "_id", F.lit(True).alias("status"))
        derived.toArrow()
        return None


def test_a_one_sink_fan_out_that_settles_from_its_reports_reads_uncached_until_it_does_not(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str
) -> None:
    """While its micro-batches settle from their reports (their reads computed once), a
    one-sink fan-out's reads are not cached: the sink's job is the one Spark job that
    reads them. When that sink returns statuses, the statuses' job reads them again (the
    recorded range) and the statuses are right; the micro-batch after is cached."""
    create_stream(moto_client, unique_name, 1)
    (shard,) = shard_ids(moto_client, unique_name)
    spy = CacheSpy(spark, statuses_from=3)
    process = fan_out(words_with_a_bad_one, "word string", [spy], "spied")
    frames, settings = frame_jobs(spark, job_config(), unique_name, process)
    position, seen, jobs = OLDEST, 0, []
    try:
        for batch in range(1, 5):
            put = put_records(moto_client, unique_name, [(f"k{i}", b"a b") for i in range(20)])
            plan = ReadPlan(batch, unique_name, shard, position, 500)
            (res,), n = frames.collect([plan], 1, settings, "r", batch)
            assert res.seqs == [seq for _, seq in put] and all(res.ok)
            assert res.end is not None
            position, seen = res.end.position, seen + len(res)
            jobs.append(n)
    finally:
        frames.close()
    assert spy.cached == [False, False, False, True]
    assert jobs == [1, 1, 2, 2]  # the sink's; from the third on, the statuses' too
    assert seen == 80


class WritesThenStatuses:
    """A sink that writes every derived record of the first micro-batch; in the second
    it reads them, creates ``flag`` (the ``emit`` answers otherwise from then on) and
    returns a status per derived record, all ok."""

    name = "flagging"

    def __init__(self, flag: Path) -> None:
        self.flag = flag
        self.calls = 0

    def __call__(self, derived: Any) -> Any:
        from pyspark.sql import functions as F

        self.calls += 1
        derived.toArrow()
        if self.calls == 1:
            return None
        self.flag.touch()
        return derived.select("_root", "_id", F.lit(True).alias("status"))


def test_uncached_reads_read_again_by_the_statuses_job_fail_the_batch_when_emit_changed(
    spark: Any, moto_client: Any, job_config: Any, unique_name: str, tmp_path: Path
) -> None:
    """The second micro-batch's reads are not cached (the first settled from its reports),
    so its statuses' job computes them again; ``emit`` now fails the ``odd`` records it
    gave the sink before. The sink's statuses may be of derived records that job did not
    make: every record of the micro-batch fails rather than any being acked."""
    create_stream(moto_client, unique_name, 1)
    (shard,) = shard_ids(moto_client, unique_name)
    flag = tmp_path / "flag"
    emit = split_unless_flagged(str(flag), str(tmp_path / "calls"))
    process = fan_out(emit, "word string", [WritesThenStatuses(flag)], "flagging")
    frames, settings = frame_jobs(spark, job_config(), unique_name, process)
    items = [(f"k{i}", b"odd one" if i % 2 else b"even one") for i in range(20)]
    try:
        put_records(moto_client, unique_name, items)
        first_plan = ReadPlan(1, unique_name, shard, OLDEST, 500)
        (first,), jobs = frames.collect([first_plan], 1, settings, "r", 1)
        assert all(first.ok) and jobs == 1  # settled from the reports
        assert first.end is not None
        put_records(moto_client, unique_name, items)
        plan = ReadPlan(2, unique_name, shard, first.end.position, 500)
        (second,), jobs = frames.collect([plan], 1, settings, "r", 2)
    finally:
        frames.close()
    assert jobs == 3  # the sink's, the statuses', the payloads'
    assert len(second) == 20 and not any(second.ok)
    assert set(second.errors.values()) == {RECOMPUTED}
    assert len(second.failed) == 20  # each with its payload, for its retry
