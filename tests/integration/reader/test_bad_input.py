"""Bad input gets a clear error: unknown stream, unreachable endpoint, bad checkpoint, config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from reader_helpers import config, fill, ids, read_all

from kinesis_spout.checkpoint.base import MemoryCheckpointStore
from kinesis_spout.config.load import load_config
from kinesis_spout.deadletter import JsonlDeadLetterSink
from kinesis_spout.errors import ConfigError, EndpointUnreachableError, StreamNotFoundError
from kinesis_spout.kinesis.getter import InvalidPositionError
from kinesis_spout.records import Checkpoint
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.servers import KinesisEmulator, KinesisMock, free_port
from kinesis_spout.testing.streams import emulator_client

pytestmark = pytest.mark.integration


def test_unknown_stream(emulator: KinesisEmulator, unique_name: str, tmp_path: Path) -> None:
    sp = KinesisSpout(config(emulator.endpoint_url, unique_name, tmp_path))
    with pytest.raises(StreamNotFoundError) as info:
        sp.open()
    msg = str(info.value)
    assert repr(unique_name) in msg and emulator.endpoint_url in msg and "us-east-1" in msg
    assert not (tmp_path / "dead").exists()  # nothing was created for a stream that is not there


def test_unreachable_endpoint(unique_name: str, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    sp = KinesisSpout(config(url, unique_name, tmp_path))
    with pytest.raises(EndpointUnreachableError, match=f"cannot reach Kinesis at {url}"):
        sp.open()


def test_endpoint_from_boto3_environment_and_default_store_and_sink(
    moto_server: KinesisEmulator,
    moto_client: Any,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written = fill(moto_client, unique_name, 100, shards=2)
    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", moto_server.endpoint_url)
    cfg = config(None, unique_name, tmp_path, retry_limit=0)
    sp = KinesisSpout(cfg)  # client, store and dead-letter sink from the config
    sp.open()
    got = read_all(sp)
    sp.close()
    assert sorted(ids(got)) == sorted(written)


def test_dead_letters_go_to_the_jsonl_directory_by_default(
    moto_server: KinesisEmulator, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    fill(moto_client, unique_name, 3, shards=1)
    cfg = config(moto_server.endpoint_url, unique_name, tmp_path, retry_limit=0, job_name="dl")
    sp = KinesisSpout(cfg, store=MemoryCheckpointStore("dl"))
    sp.open()
    first = None
    while first is None:
        first = sp.next_tuple()
    sp.fail(first, "broken")
    sp.close()
    path = JsonlDeadLetterSink(tmp_path / "dead", "dl").path_for(unique_name, first.shard_id)
    assert path.exists() and '"error":"broken"' in path.read_text()


def test_checkpoint_the_stream_never_had_is_an_error_not_a_skip(
    kinesis_mock: KinesisMock, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(kinesis_mock.endpoint_url)
    fill(client, unique_name, 10, shards=1)
    store = MemoryCheckpointStore("job")
    bogus = "49680421444009340628450472579903289879801386361247760386"
    store.save(Checkpoint(unique_name, "shardId-000000000000", bogus, 0))
    sp = KinesisSpout(config(kinesis_mock.endpoint_url, unique_name, tmp_path), store=store)
    sp.open()
    with pytest.raises(InvalidPositionError, match=f"shardId-000000000000: .*{bogus}"):
        for _ in range(20):
            sp.next_batch(10)
    sp.close()


def test_invalid_config_values_are_named(tmp_path: Path) -> None:
    f = tmp_path / "job.toml"
    f.write_text('stream_name = "s"\n[reading]\nrecords_per_call = 20000\n')
    with pytest.raises(ConfigError, match=r"records_per_call=20000: between 1 and 10000"):
        load_config(f, env={})
    with pytest.raises(ConfigError, match=r"max_calls_per_second=0.0"):
        load_config(env={"KINESIS_SPOUT_MAX_CALLS_PER_SECOND": "0"})
