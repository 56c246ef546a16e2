"""``kinesis-spout checkpoints reset`` (issue 26): refused while the job's lease is held
(naming the holder), then a spout resumes from the reset position; on the file store, a
real ZooKeeper and DynamoDB (moto's server), against the moto server. And the store rule
behind it: a reset moves a checkpoint backwards, and a reader that loaded the shard
before the reset can no longer overwrite it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kit import spout_config

from devkit.holders import start_lease_holder
from kinesis_spout.checkpoint import CheckpointStore, open_store
from kinesis_spout.cli import main
from kinesis_spout.config import SpoutConfig
from kinesis_spout.errors import StaleCheckpointError
from kinesis_spout.records import Checkpoint, Record
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client, put_records, split_in_half

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
SHARD = "shardId-000000000000"


def read_all(cfg: SpoutConfig, timeout: float = 60.0) -> list[bytes]:
    """What a fresh spout reads (and acks) until it is idle; closed with its checkpoint."""
    out: list[Record] = []
    deadline = time.monotonic() + timeout
    with KinesisSpout(cfg) as sp:
        while True:
            got = sp.next_batch(1000)
            out += got
            sp.ack_many(got)
            if not got and sp.is_idle:
                break
            assert time.monotonic() < deadline, f"not idle after {timeout}s: {sp.stats()}"
            if not got:
                time.sleep(min(sp.poll_delay(), 0.05))
    return [r.data for r in out]


def put(endpoint: str, stream: str, first: int, n: int) -> list[str]:
    items = [("k", f"r{i}".encode()) for i in range(first, first + n)]
    return [seq for _, seq in put_records(emulator_client(endpoint), stream, items)]


def reset(cfg: SpoutConfig, *how: str) -> int:
    return main(
        [
            "checkpoints",
            "reset",
            "--stream-name",
            cfg.stream_name,
            "--job-name",
            cfg.job_name,
            "--checkpoint-store",
            cfg.checkpoint_store,
            "--endpoint-url",
            str(cfg.endpoint_url),
            *how,
        ]
    )


def test_reset_is_refused_while_the_job_runs_then_a_spout_resumes_from_it(
    moto_server: MotoServer,
    store_url: str,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    endpoint = moto_server.endpoint_url
    create_stream(emulator_client(endpoint), unique_name, 1)
    seqs = put(endpoint, unique_name, 0, 10)
    cfg = spout_config(
        under=tmp_path,
        stream_name=unique_name,
        job_name="billing",
        endpoint_url=endpoint,
        checkpoint_store=store_url,
    )
    assert len(read_all(cfg)) == 10

    holder = start_lease_holder(store_url, "billing")
    try:
        assert reset(cfg, "--all", "--to-trim-horizon") == 3
        err = capsys.readouterr().err
        assert "checkpoints reset refused: job 'billing' is already running" in err
        assert f"pid {holder.pid}" in err or f":{holder.pid} " in err
    finally:
        holder.kill()
        holder.wait()
    assert read_all(cfg) == []  # nothing moved

    assert reset(cfg, "--shard", SHARD, "--to-sequence", seqs[4]) == 0
    assert f"{seqs[9]}:0 -> {seqs[4]}:0" in capsys.readouterr().out
    assert read_all(cfg) == [f"r{i}".encode() for i in range(5, 10)]

    assert reset(cfg, "--all", "--to-trim-horizon") == 0
    assert read_all(cfg) == [f"r{i}".encode() for i in range(10)]

    assert reset(cfg, "--all", "--to-latest") == 0
    put(endpoint, unique_name, 10, 2)
    assert read_all(cfg) == [b"r10", b"r11"]


def test_reset_names_a_bad_shard_and_a_bad_position(
    moto_server: MotoServer,
    store_url: str,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create_stream(emulator_client(moto_server.endpoint_url), unique_name, 1)
    cfg = spout_config(
        under=tmp_path,
        stream_name=unique_name,
        job_name="j",
        endpoint_url=moto_server.endpoint_url,
        checkpoint_store=store_url,
    )
    assert reset(cfg, "--shard", "shardId-9", "--to-latest") == 2
    assert f"--shard='shardId-9': a shard of stream {unique_name!r}: {SHARD}" in (
        capsys.readouterr().err
    )
    assert reset(cfg, "--shard", SHARD, "--to-sequence", "12ab") == 2
    assert "--to-sequence='12ab'" in capsys.readouterr().err
    assert reset(cfg, "--all", "--to-sequence", "12") == 2
    assert "one --shard, not --all" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: one target is required
        main(["checkpoints", "reset", "--all"])


def _cp(stream: str, seq: int) -> Checkpoint:
    return Checkpoint(stream, SHARD, str(seq))


def test_a_reset_moves_back_and_a_reader_that_loaded_before_cannot_overwrite_it(
    store_url: str, unique_name: str
) -> None:
    stores: list[CheckpointStore] = []

    def make(owner: str) -> CheckpointStore:
        stores.append(open_store(store_url, "job", owner=owner))
        return stores[-1]

    try:
        reader, operator = make("reader"), make("operator")
        reader.load(unique_name)
        reader.save(_cp(unique_name, 100))
        with pytest.raises(StaleCheckpointError):
            reader.save(_cp(unique_name, 50))  # readers only move forward
        back = operator.reset(unique_name, SHARD, _cp(unique_name, 50))
        assert (back.sequence_number, back.resets) == ("50", 1)
        with pytest.raises(StaleCheckpointError, match="reset by an operator"):
            reader.save(_cp(unique_name, 120))  # it did not see the reset
        with pytest.raises(StaleCheckpointError, match="reset by an operator"):
            reader.mark_ended(unique_name, SHARD, "reader")
        assert operator.load(unique_name)[SHARD].sequence_number == "50"
        restarted = make("reader")  # a reader started after the reset goes on from it
        assert restarted.load(unique_name)[SHARD].resets == 1
        saved = restarted.save(_cp(unique_name, 60))
        assert (saved.sequence_number, saved.resets) == ("60", 1)  # the count is kept
        assert make("x").load(unique_name)[SHARD].resets == 1
    finally:
        for s in stores:
            s.close()


def test_a_reload_after_a_reset_does_not_let_the_reader_overwrite_it(
    store_url: str, unique_name: str
) -> None:
    """A reader loads its stream again mid-run (a reshard, a rebalance): the reset it did
    not resume from still fences it."""
    reader = open_store(store_url, "job", owner="reader")
    operator = open_store(store_url, "job", owner="operator")
    try:
        reader.load(unique_name)
        reader.save(_cp(unique_name, 100))
        operator.reset(unique_name, SHARD, _cp(unique_name, 50))
        reader.load(unique_name)  # a reload, for another shard's sake
        with pytest.raises(StaleCheckpointError, match="reset by an operator"):
            reader.save(_cp(unique_name, 120))
        (outcome,) = reader.save_many([_cp(unique_name, 130)])
        assert isinstance(outcome, StaleCheckpointError), outcome
        assert operator.load(unique_name)[SHARD].sequence_number == "50"
    finally:
        reader.close()
        operator.close()


def test_a_running_reader_that_adopts_split_children_still_cannot_overwrite_a_reset(
    moto_server: MotoServer, store_url: str, unique_name: str, tmp_path: Path
) -> None:
    """A reader without the job lease keeps running through an operator's reset; a split
    makes it load the stream again (to adopt the children). Its next checkpoint of the
    parent is refused: the reset stays."""
    client = emulator_client(moto_server.endpoint_url)
    create_stream(client, unique_name, 1)
    seqs = put(moto_server.endpoint_url, unique_name, 0, 10)
    cfg = spout_config(
        under=tmp_path,
        stream_name=unique_name,
        job_name="billing",
        endpoint_url=moto_server.endpoint_url,
        checkpoint_store=store_url,
        shard_refresh_interval=0.2,
    )
    operator = open_store(store_url, "billing", owner="operator")
    with KinesisSpout(cfg, job_lease=False) as sp:
        got = sp.next_batch(100)
        sp.ack_many(got)
        sp.checkpoint(force=True)
        assert operator.load(unique_name)[SHARD].sequence_number == seqs[-1]
        operator.reset(unique_name, SHARD, _cp(unique_name, int(seqs[2])))
        split_in_half(client, unique_name, SHARD)  # moto: writes still land in the parent
        put(moto_server.endpoint_url, unique_name, 10, 5)
        deadline = time.monotonic() + 30
        while len(sp.shards) < 3 or len(got) < 15:  # the children adopted, the parent read
            assert time.monotonic() < deadline, (len(sp.shards), len(got))
            batch = sp.next_batch(100)
            sp.ack_many(batch)
            got += batch
            time.sleep(0.05 if not batch else 0)
        sp.checkpoint(force=True)
        stored = operator.load(unique_name)[SHARD]
        assert (stored.sequence_number, stored.resets) == (seqs[2], 1)
    operator.close()
    final = open_store(store_url, "billing", owner="x")  # the spout's final save: refused too
    assert final.load(unique_name)[SHARD].sequence_number == seqs[2]
    final.close()
