"""``kinesis-spout status`` output: the JSON document's stable keys and the table's rows;
dead-letter counting and the file job-lease probe on local files."""

from __future__ import annotations

import fcntl
import json
import logging
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from devkit.status import table_rows
from kinesis_spout.cli import main
from kinesis_spout.records import Checkpoint, ShardInfo
from kinesis_spout.status.collect import StatusInputs, collect
from kinesis_spout.status.model import (
    JobLeaseStatus,
    LagProbe,
    LeaseState,
    ShardLease,
    WorkerInfo,
)
from kinesis_spout.status.render import to_json
from kinesis_spout.status.sources_deadletters import count_dead_letters, count_directory
from kinesis_spout.status.sources_leases import file_job_lease
from kinesis_spout.status.table import COLUMNS, duration, to_table

NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
S0, S1, S2 = (f"shardId-00000000000{i}" for i in range(3))


def report_of(**kw: object):  # type: ignore[no-untyped-def]
    values: dict[str, object] = {
        "job": "billing",
        "stream": "orders",
        "stream_status": "ACTIVE",
        "checkpoint_store": "zk://127.0.0.1:2181/ks",
        "dead_letter": "./dead-letter",
        "initial_position": "TRIM_HORIZON",
        "shards": (ShardInfo(S0, ending_sequence_number="99"), ShardInfo(S1), ShardInfo(S2, S0)),
        "checkpoints": {
            S0: Checkpoint("orders", S0, "99", 0, shard_end=True, owner="w1", updated_at=NOW),
            S1: Checkpoint(
                "orders", S1, "4", 2, owner="w2", updated_at=NOW - timedelta(seconds=75)
            ),
        },
        "job_lease": JobLeaseStatus(
            LeaseState.HELD, "/ks/billing/@job-lease", "host-a:42", NOW - timedelta(hours=2)
        ),
        "leases": {S1: ShardLease("w2", "host-b", 7, NOW - timedelta(seconds=30), 3)},
        "workers": (WorkerInfo("w1", "host-a", 42, NOW), WorkerInfo("w2", "host-b", 7, NOW)),
        "lags": {
            S1: LagProbe(True, 2500, NOW - timedelta(seconds=4)),
            S2: LagProbe(None, error="GetRecords orders/x: ThrottlingException"),
        },
        "dead_letters": {S1: 2},
        "kinesis_calls": 5,
        "problems": ("shardId-000000000002: lag not known: throttled",),
    }
    values.update(kw)
    return collect(StatusInputs(**values), NOW)  # type: ignore[arg-type]


def test_json_has_the_documented_keys_and_values() -> None:
    doc = json.loads(to_json(report_of()))
    assert list(doc) == [
        "format",
        "generated_at",
        "job",
        "stream",
        "stream_status",
        "checkpoint_store",
        "dead_letter",
        "job_lease",
        "workers",
        "shards",
        "summary",
        "kinesis_calls",
        "notes",
        "problems",
        "streams",
    ]
    # each stream's part: the keys from job to problems (one stream: the top level's)
    (only,) = doc["streams"]
    top = {k: v for k, v in doc.items() if k not in ("format", "generated_at", "streams")}
    assert doc["summary"].pop("streams") == 1  # the job-wide summary counts its streams
    assert only == top
    assert doc["format"] == 1 and doc["generated_at"] == "2026-11-24T12:00:00+00:00"
    assert doc["job_lease"] == {
        "state": "held",
        "where": "/ks/billing/@job-lease",
        "holder": "host-a:42",
        "since": "2026-11-24T10:00:00+00:00",
        "age_seconds": 7200.0,
        "holder_gone": False,
    }
    assert [w["worker_id"] for w in doc["workers"]] == ["w1", "w2"]
    s0, s1, s2 = doc["shards"]
    assert list(s1) == [
        "shard_id",
        "state",
        "parents",
        "checkpoint",
        "lease",
        "lag",
        "dead_letters",
    ]
    assert (s0["state"], s1["state"], s2["state"]) == ("ended", "open", "open")
    assert s2["parents"] == [S0]
    assert s0["checkpoint"]["shard_end"] is True and s0["lag"] is None
    assert s1["checkpoint"] == {
        "sequence": "4",
        "sub_sequence": 2,
        "shard_end": False,
        "start_at": None,
        "owner": "w2",
        "updated_at": "2026-11-24T11:58:45+00:00",
        "age_seconds": 75.0,
    }
    assert s1["lease"] == {
        "owner": "w2",
        "host": "host-b",
        "pid": 7,
        "acquired_at": "2026-11-24T11:59:30+00:00",
        "age_seconds": 30.0,
        "epoch": 3,
    }
    assert s1["lag"] == {
        "pending": True,
        "millis_behind_latest": 2500,
        "next_record_arrival": "2026-11-24T11:59:56+00:00",
        "next_record_age_seconds": 4.0,
        "error": None,
    }
    assert s2["lag"]["pending"] is None and "Throttling" in s2["lag"]["error"]
    assert (s0["dead_letters"], s1["dead_letters"], s2["dead_letters"]) == (0, 2, 0)
    assert doc["summary"] == {
        "shards": 3,
        "states": {"open": 2, "waiting": 0, "closed": 0, "ended": 1, "unlisted": 0},
        "checkpoints": 2,
        "pending": 1,
        "max_millis_behind_latest": 2500,
        "oldest_checkpoint_age_seconds": 75.0,
        "dead_letters": 2,
        "unowned": [S2],
    }
    assert doc["kinesis_calls"] == 5 and doc["problems"] == [
        "shardId-000000000002: lag not known: throttled"
    ]


def test_table_has_a_row_per_shard_with_owner_lag_and_dead_letters() -> None:
    text = to_table(report_of())
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("SHARD"))
    assert lines[header].split() == list(COLUMNS)
    rows = {line.split()[0]: line.split() for line in lines[header + 1 : header + 4]}
    assert rows[S0] == [
        S0,
        "ended",
        "-",
        "-",
        "0.0s",
        "ago",
        "-",
        "-",
        "0",
        "99:0",
        "(shard",
        "end)",
    ]
    assert rows[S1] == [S1, "open", "w2", "30s", "1m15s", "ago", "2.5s", "4.0s", "2", "4:2"]
    assert rows[S2] == [S2, "open", "-", "-", "-", "?", "?", "0", "none"]
    assert "job lease: held by host-a:42 since 2026-11-24T10:00:00+00:00 (2h00m)" in text
    assert "workers: 2: w1 (host-a:42), w2 (host-b:7)" in text
    assert (
        "3 shards (2 open, 1 ended); 2 with a checkpoint; 1 with records waiting; "
        f"2 dead letters; no owner: {S2}" in text
    )
    assert "problem: shardId-000000000002: lag not known: throttled" in text


def test_table_shows_sub_second_lag_in_milliseconds() -> None:
    lags = {S1: LagProbe(True, 0, NOW), S2: LagProbe(True, 250)}
    rows = table_rows(to_table(report_of(lags=lags)))
    assert rows[S1][6:8] == ["0ms", "0.0s"] and rows[S2][5:7] == ["250ms", "-"]


def test_table_of_a_file_store_with_no_checkpoints() -> None:
    text = to_table(
        report_of(
            checkpoints={},
            leases=None,
            workers=None,
            lags={},
            job_lease=JobLeaseStatus(LeaseState.FREE, "/d/billing/.job.lock"),
            dead_letters=None,
            problems=(),
        )
    )
    assert "workers:" not in text
    assert "job lease: free, no reader running" in text
    assert "note: no checkpoints yet for job 'billing' on stream 'orders'" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("shardId-")]
    assert [r[0] for r in rows] == [S0, S1, S2]
    assert all(r[-1] == "none" and r[-2] == "-" for r in rows)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0.04, "0.0s"),
        (9.96, "10.0s"),
        (12.7, "12s"),
        (185, "3m05s"),
        (7380, "2h03m"),
        (273600, "3d04h"),
    ],
)
def test_durations(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def entry(shard: str, seq: int) -> str:
    return json.dumps({"shard_id": shard, "message_id": f"{shard}:{seq}"}) + "\n"


def test_dead_letters_are_counted_per_shard_once_each_and_torn_lines_skipped(
    tmp_path: Path,
) -> None:
    base = tmp_path / "billing" / "orders"
    base.mkdir(parents=True)
    (base / f"{S0}.jsonl").write_text(entry(S0, 1) + entry(S0, 2) + entry(S0, 1) + "\n")
    (base / f"{S1}.jsonl").write_text(entry(S1, 5) + entry(S1, 6)[:-10])  # a torn last line
    (tmp_path / "billing" / "other").mkdir()
    (tmp_path / "billing" / "other" / f"{S2}.jsonl").write_text(entry(S2, 1))
    assert count_directory(tmp_path, "billing", "orders") == {S0: 2, S1: 1}
    assert count_dead_letters(str(tmp_path), "billing", "orders") == ({S0: 2, S1: 1}, None)
    assert count_dead_letters(str(tmp_path / "missing"), "billing", "orders") == ({}, None)
    assert not (tmp_path / "missing").exists()
    assert count_dead_letters("none", "billing", "orders") == (None, None)


def test_file_job_lease_probe_tells_held_free_and_killed(tmp_path: Path) -> None:
    path = tmp_path / "billing" / ".job.lock"
    assert file_job_lease(path).state is LeaseState.FREE  # never taken
    assert not path.parent.exists()  # and nothing created
    path.parent.mkdir()
    record = {"job": "billing", "host": "host-a", "pid": 4242, "since": "2026-11-24T10:00:00+00:00"}
    path.write_text(json.dumps(record))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,sys; f=open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX); print('x', "
            "flush=True); sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "x"
        held = file_job_lease(path)
        assert (held.state, held.holder) == (LeaseState.HELD, "host-a:4242")
        assert held.since == datetime(2026, 11, 24, 10, tzinfo=UTC)
        # the probe kept no lock, and the holder's lock still refuses a shared one
        with open(path) as fh, pytest.raises(BlockingIOError):
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
    finally:
        holder.kill()
        holder.wait()
    assert file_job_lease(path).state is LeaseState.FREE  # killed: its record stays, no lock
    path.write_text("")
    assert file_job_lease(path).state is LeaseState.FREE  # released cleanly (truncated)


def test_a_bad_timeout_is_a_config_error_before_anything_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["status", "--checkpoint-store", f"file://{tmp_path}/x", "--timeout", "0"])
    assert code == 2
    assert "invalid config timeout=0.0: a number of seconds > 0" in capsys.readouterr().err


def test_status_puts_the_logging_levels_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    root, ours = logging.getLogger(), logging.getLogger("kinesis_spout")
    before = root.level, ours.level
    (tmp_path / "a-file").write_text("")
    code = main(["status", "--checkpoint-store", f"file://{tmp_path}/a-file", "--no-lag"])
    assert code == 1 and "is not a directory" in capsys.readouterr().err
    assert (root.level, ours.level) == before  # quiet while it ran, not for the process
    logging.getLogger("kinesis_spout.status").warning("still heard")
    assert "still heard" in caplog.text


def test_the_top_level_summary_is_the_whole_jobs_and_each_streams_stays_its_own() -> None:
    """With several streams, ``.summary`` once had the first stream's figures only (1 of
    the job's 2 dead letters): a script reading it undercounted."""
    orders = report_of()
    payments = report_of(stream="payments", dead_letters={S0: 1}, kinesis_calls=3)
    doc = json.loads(to_json(orders, payments))
    assert doc["stream"] == "orders"  # the first stream's keys, as a job of one has them
    job = doc["summary"]
    assert job["streams"] == 2 and job["shards"] == 6
    assert job["dead_letters"] == 3 and job["checkpoints"] == 4 and job["pending"] == 2
    assert job["states"] == {"open": 4, "waiting": 0, "closed": 0, "ended": 2, "unlisted": 0}
    assert job["unowned"] == [f"orders/{S2}", f"payments/{S2}"]
    assert doc["kinesis_calls"] == 8
    per = {s["stream"]: s["summary"] for s in doc["streams"]}
    assert per["orders"]["dead_letters"] == 2 and per["payments"]["dead_letters"] == 1
