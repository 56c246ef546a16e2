"""The chaos run's parts, one by one: the auditor's arithmetic, the schedule,
the processing function, and the watchers against real files, processes and
ZooKeeper."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from devkit.chaos import (
    PROCESS_SPECS,
    ChaosPlan,
    CheckpointSeen,
    CheckpointWatcher,
    DeadLetter,
    JobProcess,
    KillSnapshot,
    SinkProgress,
    SinkRow,
    check_monotonic,
    dead_letter_lines,
    job_config,
    make_records,
    make_schedule,
    read_dead_letter_dir,
    read_sink,
    replay_windows,
    session_members,
    tally,
)
from devkit.chaos_process import (
    PoisonRecordError,
    make_payload,
    parse_payload,
    process,
    record_id,
)
from kinesis_spout.checkpoint import open_store
from kinesis_spout.deadletter import JsonlDeadLetterSink
from kinesis_spout.errors import ConfigError
from kinesis_spout.records import Checkpoint, Record
from kinesis_spout.spark.job import build_arg_parser
from kinesis_spout.spark.job import job_config as spark_job_config
from kinesis_spout.spark.process.sinks import ParquetSink
from kinesis_spout.testing.processes import wait_until
from kinesis_spout.testing.servers import ZooKeeperServer
from tracker import SequenceKey

S0, S1 = "shardId-000000000000", "shardId-000000000001"


# --- the processing function ----------------------------------------------------------


def test_process_accepts_good_records_and_fails_poison_ones_every_time() -> None:
    good = make_payload(record_id(7), poison=False, size=64)
    bad = make_payload(record_id(8), poison=True, size=64)
    assert len(good) == len(bad) == 64
    assert parse_payload(good) == ("chaos-0000007", False)
    process(_record(good))
    for _ in range(3):
        with pytest.raises(PoisonRecordError, match="poison record chaos-0000008"):
            process(_record(bad))
    with pytest.raises(ValueError, match="not a chaos-run payload"):
        process(_record(b"hello world"))


def _record(data: bytes) -> Record:
    return Record("s", S0, "1", 0, "k", data, None, SequenceKey(1))


# --- the plan -----------------------------------------------------------------------------


def test_plan_rejects_bad_values_naming_them() -> None:
    with pytest.raises(ConfigError, match=r"records=10: an integer >= 100"):
        ChaosPlan(records=10)
    with pytest.raises(ConfigError, match=r"rates summing to at most 1 \(they sum to 1.2\)"):
        ChaosPlan(throttle=0.6, error=0.6, drop=0.0)
    assert ChaosPlan(kills=5, max_in_flight=500, shards=4).duplicate_bound == 10_000


def test_one_percent_of_records_are_poison_and_the_seed_decides_which() -> None:
    a = make_records(ChaosPlan(records=5_000, seed=3))
    assert len(a.ids) == len(set(a.ids)) == 5_000
    assert len(a.poison) == 50 and a.poison <= set(a.ids)
    assert make_records(ChaosPlan(records=5_000, seed=3)).poison == a.poison
    assert make_records(ChaosPlan(records=5_000, seed=4)).poison != a.poison
    payloads = dict(a.items(100))
    assert all(parse_payload(payloads[rid])[1] == (rid in a.poison) for rid in a.ids)


def test_kills_are_spread_over_the_run_one_per_slice() -> None:
    plan = ChaosPlan(kills=5, seed=11, kill_jitter=1.5)
    s = make_schedule(plan, 99_000)
    assert len(s.kill_rows) == 5 and list(s.kill_rows) == sorted(s.kill_rows)
    width = (0.90 - 0.08) / 5
    for i, rows in enumerate(s.kill_rows):
        assert 99_000 * (0.08 + i * width) - 1 <= rows <= 99_000 * (0.08 + (i + 1) * width)
    assert all(0 <= d <= 1.5 for d in s.kill_delays)
    assert len(s.zk_rows) == 1 and 0.25 * 99_000 - 1 <= s.zk_rows[0] <= 0.75 * 99_000
    assert make_schedule(plan, 99_000) == s
    assert make_schedule(ChaosPlan(kills=5, seed=12), 99_000).kill_rows != s.kill_rows


def test_job_config_is_what_the_spark_job_reads(tmp_path: Path) -> None:
    plan = ChaosPlan(batch_size=400, max_in_flight=100, checkpoint_interval=0.5)
    text = job_config(
        plan,
        stream="st",
        endpoint="http://127.0.0.1:1",
        zk_url="zk://127.0.0.1:2/x",
        workdir=tmp_path,
    )
    path = tmp_path / "job.toml"
    path.write_text(text)
    cfg, process_spec = spark_job_config(build_arg_parser().parse_args(["--config", str(path)]), {})
    assert process_spec == PROCESS_SPECS["per-record"]
    assert (cfg.stream_name, cfg.batch_size, cfg.max_in_flight) == ("st", 400, 100)
    assert cfg.checkpoint_store == "zk://127.0.0.1:2/x"
    assert cfg.sink == f"parquet://{tmp_path / 'sink'}"
    assert cfg.retry_limit == plan.retry_limit and cfg.stop_when_idle == plan.stop_when_idle


# --- the auditor's arithmetic ----------------------------------------------------------


def test_tally_counts_lost_duplicates_and_dead_letters() -> None:
    t = tally(
        expected=["a", "b", "c", "d", "e"],
        poison=["d", "e"],
        processed=["a", "a", "a", "b"],
        dead=[
            ("d", "PoisonRecordError: poison record d", 4),
            ("d", "PoisonRecordError: poison record d", 4),
        ],
        retry_limit=3,
    )
    assert (t.expected, t.processed_rows, t.processed_distinct) == (5, 4, 2)
    assert t.lost == 2 and t.lost_sample == ("c", "e")
    assert t.duplicates == 2
    assert (t.poison, t.dead_lettered, t.dead_letter_entries, t.dead_letter_duplicates) == (
        2,
        1,
        2,
        1,
    )
    assert t.poison_in_output == t.unexpected_dead_letters == t.unknown_ids == 0
    assert t.bad_dead_letter_entries == 0


def test_tally_flags_poison_in_the_sink_wrong_dead_letters_and_unknown_ids() -> None:
    t = tally(
        expected=["a", "b", "p"],
        poison=["p"],
        processed=["a", "p", "zz"],
        dead=[("b", "ValueError: x", 4), ("p", "some other error", 4), ("p", "poison p", 2)],
        retry_limit=3,
    )
    assert t.lost == 0
    assert t.poison_in_output == 1
    assert t.unexpected_dead_letters == 1  # "b" is not poison
    assert t.unknown_ids == 1  # "zz" was never put
    assert t.bad_dead_letter_entries == 2  # error without the id; 2 attempts, not 4


def _snap(files: set[str], cps: dict[str, int], dl: dict[str, int] | None = None) -> KillSnapshot:
    return KillSnapshot(1, 0.0, 0, frozenset(files), dl or {}, cps)


def test_duplicates_after_the_stored_checkpoint_are_explained_by_the_kill() -> None:
    before = [SinkRow(S0, seq, f"r{seq}", "part-1") for seq in range(1, 8)]
    before += [SinkRow(S1, 1, "q1", "part-1")]
    replayed = [SinkRow(S0, seq, f"r{seq}", "part-2") for seq in (6, 7)]
    replayed += [SinkRow(S1, 1, "q1", "part-2")]  # S1 had no checkpoint: all of it replays
    kill = _snap({"part-1"}, {S0: 5})
    report = replay_windows([kill], before + replayed, [])
    assert report.windows == (3,) and report.shard_max == (2,)
    assert report.unexplained_duplicates == 0
    # A duplicate at or before the stored checkpoint is not explained by any kill.
    wrong = [*before, *replayed, SinkRow(S0, 4, "r4", "part-3")]
    assert replay_windows([kill], wrong, []).unexplained_duplicates == 1
    # Nor one written after the kill into a file the kill did not see.
    late = [*before, SinkRow(S0, 9, "r9", "part-2"), SinkRow(S0, 9, "r9", "part-3")]
    assert replay_windows([kill], late, []).unexplained_duplicates == 1


def test_a_record_replayed_by_two_kills_may_appear_three_times() -> None:
    rows = [SinkRow(S0, 9, "r9", name) for name in ("part-1", "part-2", "part-3")]
    kills = [_snap({"part-1"}, {S0: 5}), _snap({"part-1", "part-2"}, {S0: 8})]
    assert replay_windows(kills, rows, []).unexplained_duplicates == 0
    assert replay_windows(kills[:1], rows, []).unexplained_duplicates == 1


def test_dead_letter_repeats_count_only_lines_written_before_the_kill() -> None:
    dead = [
        DeadLetter(S0, 6, "p6", "poison p6", 4, "a.jsonl", 0),
        DeadLetter(S0, 7, "p7", "poison p7", 4, "a.jsonl", 1),
        DeadLetter(S0, 6, "p6", "poison p6", 4, "a.jsonl", 2),
        DeadLetter(S0, 7, "p7", "poison p7", 4, "a.jsonl", 3),
    ]
    only_first_line = _snap(set(), {S0: 5}, {"a.jsonl": 1})
    report = replay_windows([only_first_line], [], dead)
    assert report.dead_letter_windows == (1,)
    assert report.unexplained_dead_letter_duplicates == 1  # p7 was not on disk at the kill
    both = _snap(set(), {S0: 5}, {"a.jsonl": 2})
    assert replay_windows([both], [], dead).unexplained_dead_letter_duplicates == 0


def _seen(
    shard: str, zxid: int, version: int, seq: int | None, end: bool = False
) -> CheckpointSeen:
    return CheckpointSeen(shard, zxid, version, seq, 0, end, 0.0, "poll")


def test_monotonicity_is_judged_in_zxid_order_not_observation_order() -> None:
    seen = [_seen(S0, 30, 2, 300), _seen(S0, 10, 0, 100), _seen(S0, 20, 1, 200)]
    seen += [_seen(S1, 11, 0, 5), _seen(S1, 11, 0, 5)]  # seen twice (poll and watch)
    report = check_monotonic(seen)
    assert report.monotonic and report.values_seen == 4 and report.shards == 2


def test_monotonicity_violations_are_named() -> None:
    back = check_monotonic([_seen(S0, 10, 0, 100), _seen(S0, 20, 1, 99)])
    assert not back.monotonic
    assert "shardId-000000000000: checkpoint went back from (100, 0)" in back.violations[0]
    unended = check_monotonic([_seen(S0, 10, 0, 100, end=True), _seen(S0, 20, 1, 100)])
    assert "shard end undone" in unended.violations[0]
    recreated = check_monotonic([_seen(S0, 10, 3, 100), _seen(S0, 20, 0, 200)])
    assert "re-created" in recreated.violations[0]
    corrupt = check_monotonic([], corrupt=["x zxid 1: b'garbage'"])
    assert not corrupt.monotonic


# --- the watchers, against real files, processes and ZooKeeper ------------------------------


def _sink_table(ids: list[str], shard: str, first_seq: int) -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "stream": ["s"] * n,
            "shardId": [shard] * n,
            "sequenceNumber": [str(first_seq + i) for i in range(n)],
            "subSequenceNumber": [0] * n,
            "data": [make_payload(rid, False, 40) for rid in ids],
        }
    )


def test_sink_progress_and_reader_follow_the_parquet_sink(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path / "sink")
    progress = SinkProgress(tmp_path / "sink")
    assert progress.refresh() == 0
    sink.write(0, _sink_table(["chaos-1", "chaos-2"], S0, 10))
    assert progress.refresh() == 2 and len(progress.files) == 1
    sink.write(1, _sink_table(["chaos-2", "chaos-3", "chaos-4"], S1, 1))
    (tmp_path / "sink" / ".tmp-part-half-written.parquet").write_bytes(b"PAR1")
    assert progress.refresh() == 5 and len(progress.files) == 2
    rows = read_sink(tmp_path / "sink")
    assert sorted(r.rid for r in rows) == ["chaos-1", "chaos-2", "chaos-2", "chaos-3", "chaos-4"]
    assert {(r.shard_id, r.sequence) for r in rows if r.rid == "chaos-1"} == {(S0, 10)}


def test_dead_letter_reader_keeps_whole_lines_and_reports_a_cut_one(tmp_path: Path) -> None:
    sink = JsonlDeadLetterSink(tmp_path / "dl", "chaos")
    for seq, rid in ((3, "chaos-0000003"), (9, "chaos-0000009")):
        rec = Record(
            "st", S0, str(seq), 0, "k", make_payload(rid, True, 60), None, SequenceKey(seq)
        )
        sink.write(rec, f"PoisonRecordError: poison record {rid}", 4)
    sink.close()
    path = sink.path_for("st", S0)
    with path.open("a") as fh:
        fh.write('{"job": "chaos", "shard_id": "shardId-0')  # a write cut by a crash
    entries, bad = read_dead_letter_dir(tmp_path / "dl")
    assert [(e.rid, e.sequence, e.attempts, e.line) for e in entries] == [
        ("chaos-0000003", 3, 4, 0),
        ("chaos-0000009", 9, 4, 1),
    ]
    assert entries[1].error == "PoisonRecordError: poison record chaos-0000009"
    assert len(bad) == 1 and ":3:" in bad[0]
    assert dead_letter_lines(tmp_path / "dl") == {"chaos/st/shardId-000000000000.jsonl": 2}


def test_job_process_kill_leaves_nothing_of_the_session(tmp_path: Path) -> None:
    # A child that moves to its own process group escapes killpg; kill() finds it
    # through the session and kills it too.
    escaper = "import os, time; os.setpgid(0, 0); time.sleep(300)"
    script = f"sleep 300 & {sys.executable} -c '{escaper}' & wait"
    job = JobProcess(["sh", "-c", script], dict(os.environ), tmp_path / "job.log").start()
    deadline = time.monotonic() + 20
    while len(session_members(job.pid)) < 3:
        assert time.monotonic() < deadline, session_members(job.pid)
        time.sleep(0.05)
    job.kill()
    assert job.poll() == -9
    assert session_members(job.pid) == []


def _states(sid: int) -> set[str]:
    """The run states (``/proc/PID/stat``) of the live processes of session ``sid``."""
    states = set()
    for pid in session_members(sid):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        states.add(stat[stat.rfind(")") + 2])
    return states


def test_job_process_pause_stops_every_process_of_the_session_until_resume(
    tmp_path: Path,
) -> None:
    # The escaper of the kill test is stopped too: pause() signals the whole session.
    escaper = "import os, time; os.setpgid(0, 0); time.sleep(300)"
    script = f"sleep 300 & {sys.executable} -c '{escaper}' & wait"
    job = JobProcess(["sh", "-c", script], dict(os.environ), tmp_path / "job.log").start()
    try:
        wait_until(lambda: len(session_members(job.pid)) == 3, 20, "the job's three processes")
        assert "T" not in _states(job.pid)
        job.pause()
        wait_until(
            lambda: _states(job.pid) == {"T"},
            10,
            "every process stopped",
            seen=lambda: _states(job.pid),
        )
        job.resume()
        wait_until(
            lambda: "T" not in _states(job.pid),
            10,
            "every process running again",
            seen=lambda: _states(job.pid),
        )
        job.pause()  # a stopped job is killed all the same
    finally:
        job.kill()
    assert session_members(job.pid) == []


def test_read_sink_reads_only_the_files_named(tmp_path: Path) -> None:
    assert read_sink(tmp_path / "sink") == []
    sink = ParquetSink(tmp_path / "sink")
    for batch, seq in ((0, 1), (1, 2)):
        sink.write(batch, _sink_table([f"chaos-{seq}"], S0, seq))
    files = sorted(p.name for p in (tmp_path / "sink").glob("part-*.parquet"))
    assert [r.sequence for r in read_sink(tmp_path / "sink")] == [1, 2]
    assert [r.sequence for r in read_sink(tmp_path / "sink", names=files[1:])] == [2]
    assert read_sink(tmp_path / "sink", names=[]) == []


@pytest.mark.integration
def test_watcher_sees_store_writes_and_flags_a_backwards_one(
    zookeeper: ZooKeeperServer, unique_name: str
) -> None:
    root = f"/tests/{unique_name}"
    store = open_store(zookeeper.url(root), "chaos", owner="w")
    raw = KazooClient(zookeeper.hosts)
    raw.start()
    watcher = CheckpointWatcher(zookeeper.hosts, f"{root}/chaos/st", interval=0.05).start()
    try:
        for seq in (10, 20, 30):
            store.save(Checkpoint("st", S0, str(seq)))
            # the next save only once the watcher saw this one (it polls and watches)
            wait_until(
                lambda seq=seq: seq in [s.sequence for s in watcher.observations()],
                10,
                f"the watcher to see checkpoint {seq}",
                seen=lambda: [s.sequence for s in watcher.observations()],
            )
        assert watcher.report().monotonic
        assert [s.sequence for s in watcher.observations()] == [10, 20, 30]
        assert watcher.read_now()[S0].sequence == 30
        # Someone writes a checkpoint behind the stored one, around the store's CAS.
        path = f"{root}/chaos/st/{S0}"
        obj = json.loads(raw.get(path)[0])
        raw.set(path, json.dumps({**obj, "sequence": "15"}).encode())
        deadline = time.monotonic() + 10
        while watcher.report().monotonic:
            assert time.monotonic() < deadline, watcher.observations()
            time.sleep(0.05)
        assert "went back from (30, 0)" in watcher.report().violations[0]
    finally:
        watcher.stop()
        raw.stop()
        raw.close()
        store.close()


@pytest.mark.integration
def test_watcher_keeps_watching_across_a_zookeeper_restart(tmp_path: Path) -> None:
    with ZooKeeperServer(workdir=tmp_path / "zk") as zk:
        store = open_store(zk.url("/w"), "chaos", owner="w")
        store.save(Checkpoint("st", S0, "1"))
        watcher = CheckpointWatcher(zk.hosts, "/w/chaos/st", interval=0.05).start()
        try:
            deadline = time.monotonic() + 10
            while not watcher.observations():
                assert time.monotonic() < deadline
                time.sleep(0.05)
            zk.stop()
            wait_until(  # ZooKeeper is restarted once the watcher found it gone
                lambda: watcher.poll_errors > 0,
                30,
                "the watcher to fail a poll while ZooKeeper is down",
                seen=lambda: watcher.poll_errors,
            )
            zk.start()
            saved = False
            deadline = time.monotonic() + 30
            while not saved:  # the store reconnects on its own
                assert time.monotonic() < deadline
                try:
                    store.save(Checkpoint("st", S0, "2"))
                    saved = True
                except Exception:
                    time.sleep(0.2)
            assert watcher.read_now()[S0].sequence == 2
            assert watcher.poll_errors > 0
            report = watcher.report()
            assert report.monotonic and report.values_seen == 2
        finally:
            watcher.stop()
            store.close()


def test_kpl_records_keep_every_id_once_with_empty_and_corrupt_aggregates() -> None:
    """``--kpl``: the ids come back from de-aggregation once each, in order; some
    Kinesis records are empty aggregates, a few corrupt ones carry one id whole."""
    from kinesis_spout.kinesis.aggregation import MAGIC, deaggregate

    plan = ChaosPlan(records=3000, seed=2, kpl=True, kill_worker_records=5)
    recs = make_records(plan)
    assert len(recs.killers) == 5 and not recs.killers & recs.poison
    puts = list(recs.items(60))
    users = [d for pk, data in puts for _, d in deaggregate(data, pk)]
    assert [parse_payload(d)[0] for d in users if d != b""] == list(recs.ids)
    empty = [data for _, data in puts if deaggregate(data, "k") == []]
    corrupt = [d for d in users if d.startswith(MAGIC)]
    assert empty and corrupt and len(puts) < len(recs.ids) / 5
    assert {parse_payload(d)[0] for d in users if parse_payload(d)[1]} == recs.failing


def test_replay_windows_compare_sub_sequence_numbers_of_aggregates() -> None:
    rows = [SinkRow(S0, 5, f"u{sub}", "part-1", sub) for sub in range(4)]
    rows += [SinkRow(S0, 5, f"u{sub}", "part-2", sub) for sub in (2, 3)]
    snap = KillSnapshot(1, 0.0, 4, frozenset({"part-1"}), {}, {S0: (5, 1)})
    report = replay_windows([snap], rows, [])
    assert report.windows == (2,) and report.unexplained_duplicates == 0
    whole = KillSnapshot(1, 0.0, 4, frozenset({"part-1"}), {}, {S0: 5})
    assert replay_windows([whole], rows, []).unexplained_duplicates == 2
