"""Several streams in one reader (issue 24): :class:`KinesisSpout` on moto and
kinesis-mock.

* Three streams of 1, 2 and 4 shards, each with poison records, read by a real
  subprocess that is killed with SIGKILL part-way and started again: every record is
  done at least once, the dead letters are exactly each stream's poison records, and each
  stream's checkpoints end at its shards' last records, in the file each stream would have
  alone.
* A stream given by ARN; a stream deleted while the others are read (a WARNING and the
  ``streams_gone`` metric; the others go on); an unknown stream is an error naming it;
  a stream with one shard is read as often as one with many.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kit import spout_config
from prometheus_client import CollectorRegistry
from reader_helpers import PACE, fill, put, rid

from kinesis_spout.checkpoint.factory import open_store
from kinesis_spout.config import SpoutConfig
from kinesis_spout.deadletter.jsonl import read_dead_letters
from kinesis_spout.errors import StreamNotFoundError
from kinesis_spout.metrics import InMemoryMetrics
from kinesis_spout.observability.prometheus import PrometheusMetrics
from kinesis_spout.records import Record
from kinesis_spout.spout import KinesisSpout, open_reader
from kinesis_spout.testing.servers import KinesisEmulator
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LOOP = """
import os, sys
from kinesis_spout import load_config, open_reader

poison = set(sys.argv[2].split(","))
done = open(sys.argv[3], "a")
with open_reader(load_config(sys.argv[1])) as spout:
    n = 0
    while not spout.is_idle:
        batch = spout.next_batch(40)
        if not batch:
            import time; time.sleep(min(spout.poll_delay(), 0.05))
            continue
        good = [r for r in batch if r.data.split(b"|")[0].decode() not in poison]
        for r in good:
            done.write(f"{r.stream} {r.data.split(b'|')[0].decode()}\\n")
        done.flush()
        os.fsync(done.fileno())
        for r in batch:
            if r in good:
                spout.ack(r)
            else:
                spout.fail(r, "poison")
        n += len(good)
        print(f"done {n}", flush=True)
print("idle", flush=True)
"""


def _last_sequences(placed: list[tuple[str, str]]) -> dict[str, str]:
    last: dict[str, str] = {}
    for shard, seq in placed:
        if shard not in last or int(seq) > int(last[shard]):
            last[shard] = seq
    return last


def _run(args: list[str], *, kill_after: int | None) -> str:
    """Run the loop; with ``kill_after``, SIGKILL it once it reported that many records
    done (waiting for the line, with a deadline). Returns its stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-c", LOOP, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        for line in proc.stdout:
            if kill_after is not None and line.startswith("done ") and int(line[5:]) >= kill_after:
                os.kill(proc.pid, signal.SIGKILL)
                break
            if line.strip() == "idle":
                break
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    if kill_after is None:
        assert proc.returncode == 0, err
    return err


def test_three_streams_with_poison_killed_and_restarted_lose_nothing(
    emulator: KinesisEmulator, emulator_kinesis: Any, unique_name: str, tmp_path: Path
) -> None:
    streams = {f"{unique_name}-s{n}": n for n in (1, 2, 4)}
    sent: dict[str, list[str]] = {}
    last: dict[str, dict[str, str]] = {}
    poison: dict[str, set[str]] = {}
    for i, (name, shards) in enumerate(streams.items()):
        create_stream(emulator_kinesis, name, shards)
        items = make_payloads(150 * shards, 60, prefix=f"x{i}-")
        last[name] = _last_sequences(put_records(emulator_kinesis, name, items))
        sent[name] = [rid(d) for _k, d in items]
        poison[name] = set(sent[name][7::50])
    names = list(streams)
    toml = tmp_path / "job.toml"
    toml.write_text(
        f"streams = {json.dumps(names)}\n"
        f'job_name = "{unique_name}"\nendpoint_url = "{emulator.endpoint_url}"\n'
        f'checkpoint_store = "file://{tmp_path / "cp"}"\ndead_letter = "{tmp_path / "dead"}"\n'
        "checkpoint_interval = 0.2\nempty_shard_backoff = 0.05\nretry_limit = 1\n"
        "message_timeout = 0\nshard_refresh_interval = 1\n"
    )
    done_file = tmp_path / "done.txt"
    args = [str(toml), ",".join(sorted(set().union(*poison.values()))), str(done_file)]
    _run(args, kill_after=250)
    killed_at = len(done_file.read_text().splitlines())
    assert killed_at < sum(len(v) for v in sent.values()) - sum(len(p) for p in poison.values())
    _run(args, kill_after=None)

    done: dict[str, Counter[str]] = {name: Counter() for name in names}
    for line in done_file.read_text().splitlines():
        stream, record = line.split()
        done[stream][record] += 1
    dead = read_dead_letters(tmp_path / "dead")
    store = open_store(f"file://{tmp_path / 'cp'}", unique_name)
    try:
        for name in names:
            good = set(sent[name]) - poison[name]
            assert set(done[name]) == good, f"{name}: lost {sorted(good - set(done[name]))[:5]}"
            mine = Counter(
                rid(base64.b64decode(d["data_base64"])) for d in dead if d["stream"] == name
            )
            assert set(mine) == poison[name] and set(mine.values()) == {1}, (name, mine)
            cps = store.load(name)
            assert {s: cp.sequence_number for s, cp in cps.items()} == last[name], name
        assert (tmp_path / "cp" / unique_name / f"{names[0]}.json").exists()
    finally:
        store.close()


def _config(
    emulator: KinesisEmulator, tmp_path: Path, streams: list[str], **kw: Any
) -> SpoutConfig:
    values: dict[str, Any] = {
        "streams": streams,
        "endpoint_url": emulator.endpoint_url,
        "checkpoint_store": f"file://{tmp_path / 'cp'}",
        "dead_letter": str(tmp_path / "dead"),
        **PACE,
    }
    return spout_config(**{**values, **kw})


def _read(spout: KinesisSpout, until: int, timeout: float = 60.0) -> list[Record]:
    out: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(out) < until:
        batch = spout.next_batch(100)
        out.extend(batch)
        spout.ack_many(batch)
        if not batch:
            assert time.monotonic() < deadline, f"read {len(out)} of {until}: {spout.stats()}"
            time.sleep(min(spout.poll_delay(), 0.05))
    return out


def test_a_stream_by_arn_and_one_by_name_route_by_stream(
    emulator: KinesisEmulator, emulator_kinesis: Any, unique_name: str, tmp_path: Path
) -> None:
    a, b = f"{unique_name}-a", f"{unique_name}-b"
    sent = {
        a: set(fill(emulator_kinesis, a, 30, shards=1, prefix="a")),
        b: set(fill(emulator_kinesis, b, 40, shards=2, prefix="b")),
    }
    arn = emulator_kinesis.describe_stream_summary(StreamName=b)["StreamDescriptionSummary"][
        "StreamARN"
    ]
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, stream="unused", job="job")
    with open_reader(_config(emulator, tmp_path, [a, arn]), metrics=metrics) as spout:
        assert isinstance(spout, KinesisSpout)
        got = _read(spout, 70)
        deadline = time.monotonic() + 30
        while not spout.is_idle:  # each shard answers once more with nothing
            assert time.monotonic() < deadline, spout.stats()
            assert spout.next_batch(100) == []
            time.sleep(0.05)
        spout.checkpoint(force=True)
        by_stream: dict[str, set[str]] = {a: set(), b: set()}
        for r in got:
            by_stream[r.stream].add(rid(r.data))
        assert by_stream == sent
        assert got[0].stream_message_id.startswith(f"{got[0].stream}/shardId-")
        with pytest.raises(Exception, match="names no stream"):
            spout.ack(got[0].message_id)
        assert set(spout.streams.sets) == {a, b}
        for name, n in ((a, 30), (b, 40)):  # each stream's series carry its name
            read = [
                registry.get_sample_value(
                    "kinesis_spout_records_read_total", {"stream": name, "job": "job", "shard": s}
                )
                or 0
                for s in spout.streams.sets[name].shards
            ]
            assert sum(read) == n, (name, read)
        assert {k.split("/")[0] for k in spout.shard_states()} == {a, b}
    store = open_store(f"file://{tmp_path / 'cp'}", "job")
    try:
        assert len(store.load(a)) == 1 and len(store.load(b)) == 2
    finally:
        store.close()


def test_an_unknown_stream_is_an_error_naming_it_and_leaves_nothing_open(
    emulator: KinesisEmulator, emulator_kinesis: Any, unique_name: str, tmp_path: Path
) -> None:
    a = f"{unique_name}-a"
    fill(emulator_kinesis, a, 5, shards=1)
    spout = KinesisSpout(_config(emulator, tmp_path, [a, f"{unique_name}-nope"]))
    with pytest.raises(StreamNotFoundError, match=f"{unique_name}-nope"):
        spout.open()
    # the job lease was let go: another reader of the job opens
    with KinesisSpout(_config(emulator, tmp_path, [a])) as again:
        assert again.config.stream_name == a


def test_a_deleted_stream_stops_being_read_and_the_others_go_on(
    emulator: KinesisEmulator,
    emulator_kinesis: Any,
    unique_name: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = f"{unique_name}-a", f"{unique_name}-b"
    fill(emulator_kinesis, a, 20, shards=1, prefix="a")
    fill(emulator_kinesis, b, 20, shards=1, prefix="b")
    metrics = InMemoryMetrics()
    with KinesisSpout(_config(emulator, tmp_path, [a, b]), metrics=metrics) as spout:
        _read(spout, 40)
        emulator_kinesis.delete_stream(StreamName=b)
        deadline = time.monotonic() + 30
        with caplog.at_level(logging.WARNING, logger="kinesis_spout.core.streams"):
            while b in spout.streams.sets:
                assert time.monotonic() < deadline, "the deleted stream is still read"
                spout.next_batch(100)
                time.sleep(0.05)
        assert f"stream {b} deleted" in caplog.text
        assert metrics.count("streams_gone") == 1, metrics.counters
        more = {rid(d) for _k, d in make_payloads(10, 50, "late")}
        put_records(emulator_kinesis, a, make_payloads(10, 50, "late"))
        assert {rid(r.data) for r in _read(spout, 10)} == more
        assert set(spout.gone) == {b}


def test_a_one_shard_stream_is_read_as_often_as_a_stream_of_eight(
    emulator: KinesisEmulator, emulator_kinesis: Any, unique_name: str, tmp_path: Path
) -> None:
    small, big = f"{unique_name}-small", f"{unique_name}-big"
    fill(emulator_kinesis, small, 300, shards=1, prefix="s", size=40)
    fill(emulator_kinesis, big, 2400, shards=8, prefix="b", size=40)
    with KinesisSpout(_config(emulator, tmp_path, [big, small])) as spout:
        first = _read(spout, 400)[:400]
    share = sum(r.stream == small for r in first) / len(first)
    # by shards it would get 1/9 of the reads (0.11); by records put 300/2700 (0.11)
    assert share >= 0.4, share


def test_a_single_stream_job_resumes_unchanged_after_upgrading_to_a_streams_list(
    emulator: KinesisEmulator, emulator_kinesis: Any, unique_name: str, tmp_path: Path
) -> None:
    a, b = f"{unique_name}-a", f"{unique_name}-b"
    sent_a = fill(emulator_kinesis, a, 60, shards=2, prefix="a")
    sent_b = fill(emulator_kinesis, b, 25, shards=1, prefix="b")
    old = SpoutConfig(**{**_config(emulator, tmp_path, [a]).as_dict(), "streams": []})
    assert old.stream_name == a and not old.streams
    with KinesisSpout(old) as spout:
        first = _read(spout, 60)
    assert sorted(rid(r.data) for r in first) == sorted(sent_a)
    put_records(emulator_kinesis, a, make_payloads(15, 40, "late"))
    with KinesisSpout(_config(emulator, tmp_path, [a, b])) as spout:
        rest = _read(spout, 40)
        deadline = time.monotonic() + 30
        while not spout.is_idle:
            assert time.monotonic() < deadline
            rest += spout.next_batch(100)
            time.sleep(0.05)
    late = sorted(rid(d) for _k, d in make_payloads(15, 40, "late"))
    assert sorted(rid(r.data) for r in rest if r.stream == a) == late
    assert sorted(rid(r.data) for r in rest if r.stream == b) == sorted(sent_b)
    assert sorted(p.name for p in (tmp_path / "cp" / "job").glob("*.json")) == sorted(
        [f"{a}.json", f"{b}.json"]
    )


def _recreate(client: Any, name: str, shards: int) -> None:
    client.delete_stream(StreamName=name)
    deadline = time.monotonic() + 30
    while True:
        try:
            client.describe_stream_summary(StreamName=name)
        except client.exceptions.ResourceNotFoundException:
            break
        assert time.monotonic() < deadline, f"{name} still there"
        time.sleep(0.1)
    time.sleep(0.01)  # a creation time after the old one's
    create_stream(client, name, shards)


def test_a_stream_created_again_under_its_name_is_read_from_its_start_not_resumed(
    emulator: KinesisEmulator, emulator_kinesis: Any, unique_name: str, tmp_path: Path
) -> None:
    a = unique_name
    old = fill(emulator_kinesis, a, 40, shards=1, prefix="old")
    with KinesisSpout(_config(emulator, tmp_path, [a])) as spout:
        assert sorted(rid(r.data) for r in _read(spout, 40)) == sorted(old)
    _recreate(emulator_kinesis, a, 1)
    new = put(emulator_kinesis, a, 12, prefix="new")  # fewer: the old position is past them
    with KinesisSpout(_config(emulator, tmp_path, [a])) as spout:
        assert sorted(rid(r.data) for r in _read(spout, 12)) == sorted(new)
    kept = list((tmp_path / "cp" / "job").glob(f"{a}.json.retired-*"))
    assert len(kept) == 1 and "shardId-000000000000" in kept[0].read_text()


def test_a_stream_created_again_while_read_is_let_go_and_the_others_go_on(
    emulator: KinesisEmulator, emulator_kinesis: Any, unique_name: str, tmp_path: Path
) -> None:
    a, b = f"{unique_name}-a", f"{unique_name}-b"
    fill(emulator_kinesis, a, 10, shards=1, prefix="a")
    fill(emulator_kinesis, b, 10, shards=1, prefix="b")
    metrics = InMemoryMetrics()
    cfg = _config(emulator, tmp_path, [a, b], shard_refresh_interval=0.2)
    with KinesisSpout(cfg, metrics=metrics) as spout:
        _read(spout, 20)
        _recreate(emulator_kinesis, b, 1)
        put(emulator_kinesis, b, 5, prefix="new")
        deadline = time.monotonic() + 30
        while b in spout.streams.sets:
            assert time.monotonic() < deadline, "the recreated stream is still read"
            assert all(r.stream == a for r in spout.next_batch(100))
            time.sleep(0.05)
        assert "created again" in spout.gone[b] or "deleted" in spout.gone[b]
        assert metrics.count("streams_gone") == 1


def test_the_readme_loop_with_streams_in_job_toml_reads_every_stream(
    moto_server: Any, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """The quickstart's ``loop.py``, as the README has it, with ``streams = [a, b]`` in its
    ``job.toml``: every order of both streams is handled (the one not JSON of each stream
    dead-lettered) and each stream checkpointed. The release before read the first
    stream only and said nothing."""
    import re
    import signal
    import subprocess
    import sys

    from kinesis_spout.checkpoint import open_store

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    loop = re.search(r"`loop\.py`.*?^```python\n(.*?)^```$", readme, flags=re.M | re.S)
    assert loop is not None, "the README's loop.py"
    (tmp_path / "loop.py").write_text(loop.group(1))
    names = [f"{unique_name}-a", f"{unique_name}-b"]
    for n, name in enumerate(names):
        create_stream(moto_client, name, 2)
        items = [(f"c{i}", b'{"order": %d}' % (100 * n + i)) for i in range(20)]
        items[7] = ("c7", b"not json")
        put_records(moto_client, name, items)
    (tmp_path / "job.toml").write_text(
        f"streams = {names!r}\n"
        f'job_name = "{unique_name}"\n'
        'region = "us-east-1"\n'
        f'endpoint_url = "{moto_server.endpoint_url}"\n'
        'checkpoint_store = "file://./checkpoints"\n'
        'dead_letter = "./dead-letter"\n'
        "retry_limit = 0\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "loop.py"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:  # until the line that counts everything (or the test timeout)
        out.append(line)
        if "acked 38, dead-lettered 2, in flight 0" in line:
            break
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, "".join(out) + rest
    orders = {int(line.split()[1]) for line in out if line.startswith("order ")}
    assert orders == {100 * n + i for n in range(2) for i in range(20) if i != 7}
    store = open_store(f"file://{tmp_path / 'checkpoints'}", unique_name)
    try:
        assert all(store.load(name) for name in names)  # each stream checkpointed
    finally:
        store.close()
