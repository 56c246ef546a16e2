"""The operations commands over a job of two streams, on the moto server, as a user runs
them (the installed command, a terminal of 80 columns, the quickstart's ``job.toml`` with
``streams`` added): each covers every stream of the config, ``--stream NAME`` picks one,
and every line that names a shard names its stream. Each stream has a shard
``shardId-000000000000``, and each has checkpoints and dead letters of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devkit.status import run_command
from kinesis_spout.checkpoint.file import FileCheckpointStore
from kinesis_spout.deadletter import DeadLetter, JsonlDeadLetterSink
from kinesis_spout.records import Checkpoint, Record
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client, put_records
from tracker import SequenceKey

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SHARD0, SHARD1 = "shardId-000000000000", "shardId-000000000001"


def _letter(stream: str, seq: str) -> DeadLetter:
    key = SequenceKey(int(seq))
    record = Record(stream, SHARD0, seq, 0, f"pk-{stream}", b"not json", None, key)
    return DeadLetter(record, "ValueError('not json')", 3)


@pytest.fixture
def job(moto_server: MotoServer, unique_name: str, tmp_path: Path) -> dict[str, str]:
    """Streams ``<name>-a`` (1 shard) and ``<name>-b`` (2 shards), 20 records each; shard 0
    of each checkpointed after its second record and its first record dead-lettered;
    ``job.toml`` in ``tmp_path`` naming both (with ``stream_name`` too, as users write it)."""
    client = emulator_client(moto_server.endpoint_url)
    a, b = f"{unique_name}-a", f"{unique_name}-b"
    store = FileCheckpointStore(tmp_path / "checkpoints", "billing")
    sink = JsonlDeadLetterSink(tmp_path / "dead-letter", "billing")
    for stream, shards in ((a, 1), (b, 2)):
        create_stream(client, stream, shards)
        items = [(f"k{i}", f"r{i}".encode()) for i in range(20)]
        seqs = [seq for shard, seq in put_records(client, stream, items) if shard == SHARD0]
        store.save(Checkpoint(stream, SHARD0, seqs[1], 0, job_name="billing"))
        sink.write_many([_letter(stream, seqs[0])])
    store.close()
    sink.close()
    (tmp_path / "job.toml").write_text(
        f'stream_name = "{a}"\n'
        f'streams = ["{a}", "{b}"]\n'
        'job_name = "billing"\n'
        'region = "us-east-1"\n'
        f'endpoint_url = "{moto_server.endpoint_url}"\n'
        'checkpoint_store = "file://./checkpoints"\n'
        'dead_letter = "./dead-letter"\n'
    )
    return {"a": a, "b": b, "dir": str(tmp_path)}


def cli(job: dict[str, str], *args: str) -> tuple[int, list[str], str]:
    """Exit status, stdout lines and stderr of ``kinesis-spout ARGS --config job.toml``."""
    proc = run_command(*args, "--config", "job.toml", cwd=Path(job["dir"]))
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout.splitlines(), proc.stderr


def test_status_covers_both_streams_and_its_summary_is_the_whole_jobs(
    job: dict[str, str],
) -> None:
    a, b = job["a"], job["b"]
    code, out, err = cli(job, "status")
    assert code == 0, err
    heads = [line.split(" (")[0] for line in out if line.startswith("job 'billing' on")]
    assert heads == [f"job 'billing' on stream '{a}'", f"job 'billing' on stream '{b}'"]
    wide = [line for line in out if len(line) > 80 and not line.startswith("job 'billing' on")]
    assert wide == []  # a terminal of 80 columns (the header names the stream and time)

    code, out, err = cli(job, "status", "--stream", b)
    assert code == 0, err
    assert out[0].startswith(f"job 'billing' on stream '{b}' (ACTIVE)")
    assert not any(f"'{a}'" in line for line in out)

    code, out, err = cli(job, "status", "--json")
    doc = json.loads("\n".join(out))
    assert doc["summary"]["dead_letters"] == 2 and doc["summary"]["streams"] == 2
    assert doc["summary"]["shards"] == 3
    assert [(s["stream"], s["summary"]["dead_letters"]) for s in doc["streams"]] == [(a, 1), (b, 1)]


def test_dead_letters_list_names_the_stream_of_each_entry(job: dict[str, str]) -> None:
    a, b = job["a"], job["b"]
    code, out, _ = cli(job, "dead-letters", "list")
    assert code == 0
    assert [line.split("\t")[:2] for line in out[:-1]] == [[a, SHARD0], [b, SHARD0]]
    assert out[-1] == f"2 dead letters in ./dead-letter (job 'billing', streams '{a}', '{b}')"

    code, out, _ = cli(job, "dead-letters", "list", "--stream", b)
    assert code == 0 and len(out) == 2
    assert out[0].startswith(f"{b}\t{SHARD0}\t")
    assert out[-1] == f"1 dead letter in ./dead-letter (job 'billing', stream '{b}')"


def test_dead_letters_redrive_puts_each_entry_back_on_its_own_stream(
    job: dict[str, str], moto_server: MotoServer
) -> None:
    a, b = job["a"], job["b"]
    code, out, err = cli(job, "dead-letters", "redrive", "--dry-run")
    assert code == 0, err
    assert out[0].startswith(f"would put {a}/{SHARD0}:") and out[0].endswith(f"(pk-{a}) on {a}")
    assert out[1] == f"1 to re-drive from stream '{a}' onto '{a}'"
    assert out[2].startswith(f"would put {b}/{SHARD0}:")
    assert out[3] == f"1 to re-drive from stream '{b}' onto '{b}'"

    code, out, err = cli(job, "dead-letters", "redrive", "--stream", b, "--delete")
    assert code == 0, err
    assert out == [
        f"re-drove 1 of 1 dead letter of stream '{b}' onto stream '{b}'",
        f"removed 1 entry of stream '{b}' (1 files or objects emptied)",
    ]
    client = emulator_client(moto_server.endpoint_url)
    data = []
    for shard in (SHARD0, SHARD1):
        it = client.get_shard_iterator(
            StreamName=b, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )
        data += [
            r["Data"] for r in client.get_records(ShardIterator=it["ShardIterator"])["Records"]
        ]
    assert data.count(b"not json") == 1
    code, out, _ = cli(job, "dead-letters", "list")
    assert out[-1] == f"1 dead letter in ./dead-letter (job 'billing', streams '{a}', '{b}')"


def test_checkpoints_and_reset_cover_both_streams_and_stream_picks_one(
    job: dict[str, str],
) -> None:
    a, b = job["a"], job["b"]
    code, out, err = cli(job, "checkpoints")
    assert code == 0, err
    assert out[0].split() == ["STREAM", "SHARD", "CHECKPOINT", "SAVED"]
    assert [line.split()[:2] for line in out[1:3]] == [[a, SHARD0], [b, SHARD0]]
    assert out[-1] == f"2 checkpoints of job 'billing', streams '{a}', '{b}'"

    code, out, err = cli(job, "checkpoints", "reset", "--shard", SHARD0, "--to-latest")
    assert (code, out) == (2, [])
    assert err.splitlines() == [
        "kinesis-spout checkpoints reset: error: invalid config --shard='shardId-000000000000': "
        f"a shard of one stream: add --stream NAME (one of '{a}', '{b}')"
    ]

    code, out, err = cli(job, "checkpoints", "reset", "--all", "--to-trim-horizon")
    assert code == 0, err
    assert [line.split()[:2] for line in out[:-1]] == [[a, SHARD0], [b, SHARD0], [b, SHARD1]]
    assert all(line.endswith("-> start at TRIM_HORIZON") for line in out[:-1]), out
    assert out[-1] == f"reset 3 checkpoints of job 'billing', streams '{a}', '{b}'"

    code, out, err = cli(
        job, "checkpoints", "reset", "--stream", b, "--shard", SHARD1, "--to-latest"
    )
    assert code == 0, err
    assert out[0].split()[:5] == [b, SHARD1, "start", "at", "TRIM_HORIZON"]
    assert out[-1] == f"reset 1 checkpoint of job 'billing', stream '{b}'"

    code, out, _ = cli(job, "checkpoints", "--stream", a)
    assert [line.split()[:2] for line in out[1:-1]] == [[a, SHARD0]]
    assert out[-1] == f"1 checkpoint of job 'billing', stream '{a}'"


def test_a_dry_run_with_nothing_to_do_says_so_and_checks_the_stream(job: dict[str, str]) -> None:
    """``redrive --reason expired --dry-run`` with nothing to do printed nothing and did
    not check that the stream it would put on exists."""
    a = job["a"]
    code, out, err = cli(
        job, "dead-letters", "redrive", "--stream", a, "--reason", "expired", "--dry-run"
    )
    assert (code, out, err) == (0, [f"0 to re-drive from stream '{a}' onto '{a}'"], "")
    code, out, err = cli(
        job,
        "dead-letters",
        "redrive",
        "--stream",
        a,
        "--reason",
        "expired",
        "--dry-run",
        "--to-stream",
        "nosuch",
    )
    assert (code, out) == (1, [])
    first = err.splitlines()[0]
    assert first.startswith(
        "kinesis-spout dead-letters redrive: error: stream 'nosuch' not found at http://"
    ), err
    assert len(err.splitlines()) == 1
