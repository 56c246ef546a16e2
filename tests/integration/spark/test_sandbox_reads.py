"""A read task's sandbox over a real shard (moto, no Spark): a record that kills the
process running it ends the read just before it, and the next plan fetches it, also
inside a KPL aggregate. Nothing before it runs again, nothing after it is skipped."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kinesis_spout.config import InitialPosition
from kinesis_spout.records import GetterPosition, Record
from kinesis_spout.spark.plan import ReadPlan, ReadResult, ReadSettings
from kinesis_spout.spark.sandbox import Sandbox
from kinesis_spout.testing.streams import create_stream, kpl_aggregate, put_records

pytestmark = [pytest.mark.integration]

START = GetterPosition(None, None, True, InitialPosition.TRIM_HORIZON, None)
SHARD = "shardId-000000000000"


class Calls:
    """Each call's key noted in a file (the child runs it); ``kill`` ends the process."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __call__(self, r: Record) -> None:
        with open(self.path, "a") as f:
            f.write(f"{r.sequence_number}:{r.sub_sequence_number}\n")
        if r.data == b"kill":
            os._exit(9)


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox()
    yield box
    box._forget([])


def read_to_tip(
    box: Sandbox, endpoint: str, stream: str, fn: Calls, limit: int
) -> list[ReadResult]:
    """Plan after plan from the shard's start, as the planner plans them: after a read
    that names a poisoned record, a fetch plan."""
    settings = ReadSettings("us-east-1", endpoint, 1000, 100.0, 0.05, 0.5, 5.0)
    position, fetch, out = START, None, []
    for task in range(20):
        size = 1 if fetch else limit
        plan = ReadPlan(task, stream, SHARD, position, size, fetch=fetch)
        (res,) = box.run([plan], settings, fn, task)
        out.append(res)
        assert res.end is not None and res.end.position is not None
        position = res.end.position
        if plan.fetch is None or len(res):
            fetch = res.poisoned
        if fetch is None and res.end.caught_up and not res.end.taken:
            return out
    raise AssertionError(f"never reached the tip: {out}")


def keys(results: list[ReadResult]) -> list[tuple[str, int, bool]]:
    return [
        (q, s, bool(r.ok[i]))
        for r in results
        for i, (q, s) in enumerate(zip(r.seqs, r.subs, strict=True))
    ]


def test_a_killer_ends_the_read_before_it_and_the_next_plan_fetches_it(
    sandbox: Sandbox, moto_server: Any, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 1)
    items = [(f"k{i}", b"kill" if i == 7 else b"r%d" % i) for i in range(20)]
    put = put_records(moto_client, unique_name, items)
    results = read_to_tip(sandbox, moto_server.endpoint_url, unique_name, Calls(tmp_path / "c"), 50)

    first = results[0]
    assert first.seqs == [seq for _, seq in put[:7]] and all(first.ok)
    assert first.poisoned is not None and "died (exit code 9)" in first.poisoned
    assert [(k[0], k[2]) for k in keys(results)] == [
        (seq, i != 7) for i, (_, seq) in enumerate(put)
    ]
    fetched = results[1].failed[0]
    assert fetched.data == b"kill" and fetched.attempt == 1
    calls = Counter((tmp_path / "c").read_text().split())
    assert calls == Counter(f"{seq}:0" for _, seq in put)  # each once, the killer too


def test_a_killer_inside_a_kpl_aggregate_is_fetched_from_inside_it(
    sandbox: Sandbox, moto_server: Any, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """The read ends after the aggregate's sub-record 2 (it says the aggregate is one,
    so a checkpoint there is not taken for the whole of it); the fetch gets sub-record 3,
    the next read the rest of the aggregate."""
    create_stream(moto_client, unique_name, 1)
    users = [(f"u{i}", b"kill" if i == 3 else b"u%d" % i) for i in range(6)]
    put = put_records(moto_client, unique_name, [("a", b"plain"), kpl_aggregate(users)])
    agg_seq = put[1][1]
    results = read_to_tip(sandbox, moto_server.endpoint_url, unique_name, Calls(tmp_path / "c"), 50)

    first = results[0]
    assert first.end is not None and first.end.position is not None
    assert first.end.last is not None and first.end.last.sub_sequence == 2
    assert int(agg_seq) in first.end.aggregates and not first.end.position.after_whole
    assert keys(results) == [(put[0][1], 0, True)] + [(agg_seq, i, i != 3) for i in range(6)]
    calls = Counter((tmp_path / "c").read_text().split())
    assert calls == Counter([f"{put[0][1]}:0"] + [f"{agg_seq}:{i}" for i in range(6)])
