"""``kinesis-spout status``, the pure parts: shard phases from lineage and checkpoints,
where a lag probe starts, the assembled report and its totals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kinesis_spout.records import Checkpoint, ShardInfo
from kinesis_spout.status.collect import (
    StatusInputs,
    collect,
    probe_start,
    probe_starts,
    shard_phases,
)
from kinesis_spout.status.model import (
    JobLeaseStatus,
    LagProbe,
    LeaseState,
    ProbeStart,
    ShardLease,
    ShardPhase,
    WorkerInfo,
)

NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)


def sid(i: int) -> str:
    return f"shardId-{i:012d}"


def cp(shard: str, seq: str | None = "100", end: bool = False, **kw: object) -> Checkpoint:
    return Checkpoint("orders", shard, seq, 0, shard_end=end, **kw)  # type: ignore[arg-type]


# A split of 0 into 2 and 3; 1 untouched; 4 merges 2 and 1 later (so it waits on 2 and 1).
LINEAGE = (
    ShardInfo(sid(0), ending_sequence_number="900"),
    ShardInfo(sid(1)),
    ShardInfo(sid(2), sid(0)),
    ShardInfo(sid(3), sid(0)),
)


def test_phases_follow_lineage_and_shard_ends() -> None:
    phases = shard_phases(LINEAGE, {})
    assert phases == {
        sid(0): ShardPhase.CLOSED,  # closed by the split, records not all done
        sid(1): ShardPhase.OPEN,
        sid(2): ShardPhase.WAITING,
        sid(3): ShardPhase.WAITING,
    }
    phases = shard_phases(LINEAGE, {sid(0): cp(sid(0), "900", end=True)})
    assert [phases[sid(i)] for i in range(4)] == [
        ShardPhase.ENDED,
        ShardPhase.OPEN,
        ShardPhase.OPEN,
        ShardPhase.OPEN,
    ]


def test_a_merge_child_waits_until_both_parents_ended() -> None:
    shards = (
        ShardInfo(sid(0), ending_sequence_number="9"),
        ShardInfo(sid(1), ending_sequence_number="9"),
        ShardInfo(sid(2), sid(0), sid(1)),
    )
    one = shard_phases(shards, {sid(0): cp(sid(0), end=True)})
    assert (one[sid(1)], one[sid(2)]) == (ShardPhase.CLOSED, ShardPhase.WAITING)
    both = shard_phases(shards, {s: cp(s, end=True) for s in (sid(0), sid(1))})
    assert both[sid(2)] is ShardPhase.OPEN


def test_checkpoints_of_shards_kinesis_no_longer_lists_are_unlisted_and_last() -> None:
    phases = shard_phases(
        [ShardInfo(sid(7), sid(3))], {sid(3): cp(sid(3), end=True), sid(1): cp(sid(1))}
    )
    assert list(phases.items()) == [
        (sid(7), ShardPhase.OPEN),  # its parent is trimmed: nothing left to wait for
        (sid(1), ShardPhase.UNLISTED),
        (sid(3), ShardPhase.UNLISTED),
    ]


def test_phases_are_in_shard_number_order() -> None:
    shards = [ShardInfo(sid(10)), ShardInfo(sid(2)), ShardInfo(sid(1))]
    assert list(shard_phases(shards, {})) == [sid(1), sid(2), sid(10)]


@pytest.mark.parametrize(
    ("phase", "checkpoint", "position", "expected"),
    [
        (ShardPhase.OPEN, cp(sid(0), "123"), "LATEST", ProbeStart("AFTER_SEQUENCE_NUMBER", "123")),
        (
            ShardPhase.CLOSED,
            cp(sid(0), "5"),
            "TRIM_HORIZON",
            ProbeStart("AFTER_SEQUENCE_NUMBER", "5"),
        ),
        (ShardPhase.OPEN, None, "TRIM_HORIZON", ProbeStart("TRIM_HORIZON")),
        (ShardPhase.WAITING, None, "TRIM_HORIZON", ProbeStart("TRIM_HORIZON")),
        (ShardPhase.OPEN, None, "LATEST", None),  # nothing is behind a job that starts at LATEST
        (
            ShardPhase.OPEN,
            cp(sid(0), None, start_at=NOW),
            "LATEST",
            ProbeStart("AT_TIMESTAMP", timestamp=NOW),
        ),  # a pinned start
        (ShardPhase.OPEN, None, "AT_TIMESTAMP", ProbeStart("AT_TIMESTAMP", timestamp=NOW)),
        (ShardPhase.ENDED, cp(sid(0), "5", end=True), "TRIM_HORIZON", None),
        (ShardPhase.UNLISTED, cp(sid(0), "5"), "TRIM_HORIZON", None),
    ],
)
def test_where_the_lag_probe_starts(
    phase: ShardPhase, checkpoint: Checkpoint | None, position: str, expected: ProbeStart | None
) -> None:
    assert probe_start(phase, checkpoint, position, NOW) == expected


def test_probe_starts_skip_ended_shards() -> None:
    starts = probe_starts(
        LINEAGE, {sid(0): cp(sid(0), "900", end=True), sid(1): cp(sid(1), "7")}, "TRIM_HORIZON"
    )
    assert starts == {
        sid(1): ProbeStart("AFTER_SEQUENCE_NUMBER", "7"),
        sid(2): ProbeStart("TRIM_HORIZON"),
        sid(3): ProbeStart("TRIM_HORIZON"),
    }


def inputs(**kw: object) -> StatusInputs:
    values: dict[str, object] = {
        "job": "billing",
        "stream": "orders",
        "stream_status": "ACTIVE",
        "checkpoint_store": "zk://127.0.0.1:2181/ks",
        "dead_letter": "./dead-letter",
        "initial_position": "TRIM_HORIZON",
        "shards": (ShardInfo(sid(0)), ShardInfo(sid(1))),
        "checkpoints": {},
        "job_lease": JobLeaseStatus(LeaseState.FREE, "/ks/billing/@job-lease"),
    }
    values.update(kw)
    return StatusInputs(**values)  # type: ignore[arg-type]


def test_report_rows_ages_and_totals() -> None:
    leases = {sid(0): ShardLease("w1", "host-a", 42, NOW - timedelta(minutes=3), 2)}
    lags = {
        sid(0): LagProbe(pending=False, millis_behind_latest=0),
        sid(1): LagProbe(True, 4500, next_arrival=NOW - timedelta(seconds=90)),
    }
    report = collect(
        inputs(
            checkpoints={sid(0): cp(sid(0), "77", updated_at=NOW - timedelta(seconds=12))},
            leases=leases,
            workers=(WorkerInfo("w1", "host-a", 42, NOW), WorkerInfo("w2", "host-b", 7, NOW)),
            lags=lags,
            dead_letters={sid(1): 3, "shardId-000000000099": 1},
            kinesis_calls=6,
        ),
        NOW,
    )
    first, second = report.shards
    assert (first.shard_id, first.checkpoint_age, first.lease_age) == (sid(0), 12.0, 180.0)
    assert first.lease is not None and first.lease.owner == "w1"
    assert (first.dead_letters, second.dead_letters) == (0, 3)
    assert second.checkpoint is None and second.checkpoint_age is None and second.lease is None
    assert second.next_record_age == 90.0 and first.next_record_age is None
    s = report.summary
    assert (s.shards, s.checkpoints, s.pending, s.max_millis_behind_latest) == (2, 1, 1, 4500)
    assert dict(s.by_phase) == {"open": 2, "waiting": 0, "closed": 0, "ended": 0, "unlisted": 0}
    assert s.dead_letters == 4  # every shard of the target counts, listed or not
    assert s.oldest_checkpoint_age == 12.0
    assert s.unowned == (sid(1),)  # workers run, and none holds shard 1
    assert report.notes == () and report.kinesis_calls == 6


def test_no_checkpoints_yet_is_said_and_every_shard_still_listed() -> None:
    report = collect(inputs(), NOW)
    assert [r.shard_id for r in report.shards] == [sid(0), sid(1)]
    assert report.notes == (
        "no checkpoints yet for job 'billing' on stream 'orders': every shard starts at "
        "TRIM_HORIZON",
    )
    s = report.summary
    assert (s.checkpoints, s.oldest_checkpoint_age, s.max_millis_behind_latest) == (0, None, None)
    assert s.dead_letters is None and s.unowned == ()  # no workers: no one is missing


def test_a_job_lease_holder_without_workers_reads_every_shard() -> None:
    lease = JobLeaseStatus(LeaseState.HELD, "x", holder="host-a:42", since=NOW)
    report = collect(
        inputs(checkpoints={sid(0): cp(sid(0))}, job_lease=lease, dead_letter="none"), NOW
    )
    assert report.notes == (
        "no worker holds shard leases: the job-lease holder host-a:42 reads every shard",
        "dead_letter = none: given-up records are logged, not kept",
    )
    assert report.summary.unowned == ()


def test_ages_never_go_negative_with_a_clock_ahead() -> None:
    ahead = NOW + timedelta(seconds=5)
    report = collect(inputs(checkpoints={sid(0): cp(sid(0), updated_at=ahead)}), NOW)
    assert report.shards[0].checkpoint_age == 0.0
