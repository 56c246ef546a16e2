"""Bad input: every case of the bad-input table (docs/guarantees.md) gets a clear error
and writes no checkpoint.

Config mistakes go through the real command (``kinesis-spout run``), which
refuses them before Spark starts (exit code 2). The others run the job's
driver against real servers (moto, ZooKeeper, the shared local Spark): the
error raised is the one the job prints as ``kinesis-spout job: failed: ...``
(exit code 1); one of them also goes through ``spark-submit`` end to end.
After each, nothing is written: no checkpoint file or node (a pre-existing
node keeps its bytes and its version), no dead letter, no sink file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kit import spout_config

from devkit.chaos_process import make_payload, record_id
from kinesis_spout.errors import (
    CheckpointStoreUnavailableError,
    CorruptCheckpointError,
    CredentialsError,
    EndpointUnreachableError,
    KinesisError,
    StreamNotFoundError,
)
from kinesis_spout.spark import run_job
from kinesis_spout.spark.submit import job_environment
from kinesis_spout.testing.servers import MotoServer, ZooKeeperServer, free_port
from kinesis_spout.testing.streams import create_stream, put_records

pytestmark = pytest.mark.integration

PROCESS = "devkit.chaos_process:process"
SHARD0 = "shardId-000000000000"


@dataclass
class Workspace:
    """Where a job would write: checkpoints (file store), dead letters, sink."""

    root: Path

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def flags(self) -> dict[str, str]:
        return {
            "checkpoint_store": f"file://{self.checkpoints}",
            "dead_letter": str(self.root / "dead-letter"),
            "sink": f"parquet://{self.root / 'sink'}",
        }

    def written(self) -> list[str]:
        """Every file the job left behind (there must be none), but for the job
        lease's lock file, which only says who runs the job and is empty after."""
        return sorted(
            str(p.relative_to(self.root))
            for name in ("checkpoints", "dead-letter", "sink")
            if (self.root / name).exists()
            for p in (self.root / name).rglob("*")
            if p.is_file() and not (p.name == ".job.lock" and p.stat().st_size == 0)
        )


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


def cli_run(config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``kinesis-spout run --config FILE`` as a user types it."""
    return subprocess.run(
        [sys.executable, "-m", "kinesis_spout.cli", "run", "--config", str(config), *extra],
        capture_output=True,
        text=True,
        timeout=300,
        env=job_environment(),
    )


def toml_file(ws: Workspace, body: str) -> Path:
    head = "".join(f'{k} = "{v}"\n' for k, v in ws.flags().items())
    path = ws.root / "job.toml"
    path.write_text(head + f'process = "{PROCESS}"\n' + body)
    return path


# --- config mistakes: refused before Spark starts ----------------------------------------


def test_malformed_toml(ws: Workspace) -> None:
    path = toml_file(ws, 'stream_name = "orders\nretry_limit = 3\n')
    res = cli_run(path)
    assert res.returncode == 2, res.stderr
    assert f"kinesis-spout run: error: invalid config config='{path}': valid TOML (" in res.stderr
    assert "line 5" in res.stderr  # where the mistake is
    assert ws.written() == []


def test_unknown_key(ws: Workspace) -> None:
    res = cli_run(toml_file(ws, 'stream_name = "orders"\n[reliability]\nretry_limt = 3\n'))
    assert res.returncode == 2, res.stderr
    assert "kinesis-spout run: error: invalid config retry_limt=3: unknown key" in res.stderr
    assert "did you mean retry_limit?" in res.stderr  # the closest known key
    assert ws.written() == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("max_in_flight = 0", "invalid config max_in_flight=0: an integer >= 1"),
        ("retry_limit = -1", "invalid config retry_limit=-1: an integer >= 0"),
        ("records_per_call = 20000", "invalid config records_per_call=20000: between 1 and 10000"),
        (
            "checkpoint_interval = 0",
            "invalid config checkpoint_interval=0.0: a number of seconds > 0",
        ),
        (
            'initial_position = "OLDEST"',
            "invalid config initial_position='OLDEST': expected one of",
        ),
    ],
)
def test_out_of_range_values(ws: Workspace, line: str, message: str) -> None:
    res = cli_run(toml_file(ws, f'stream_name = "orders"\n{line}\n'))
    assert res.returncode == 2, res.stderr
    assert f"kinesis-spout run: error: {message}" in res.stderr
    assert ws.written() == []


# --- Kinesis: the stream, the endpoint, the credentials -----------------------------------


def run_driver(ws: Workspace, spark: Any, **values: Any) -> None:
    cfg = spout_config(**{**ws.flags(), "stop_when_idle": 1.0, **values})
    run_job(cfg, PROCESS, spark=spark, progress=None)


@pytest.fixture
def filled_stream(moto_client: Any, unique_name: str) -> list[tuple[str, str]]:
    create_stream(moto_client, unique_name, 2)
    return put_records(
        moto_client,
        unique_name,
        ((record_id(i), make_payload(record_id(i), False, 64)) for i in range(20)),
    )


@pytest.mark.spark
def test_unknown_stream(
    ws: Workspace, spark: Any, moto_server: MotoServer, unique_name: str
) -> None:
    with pytest.raises(StreamNotFoundError) as info:
        run_driver(ws, spark, stream_name=unique_name, endpoint_url=moto_server.endpoint_url)
    assert str(info.value) == (
        f"stream {unique_name!r} not found at {moto_server.endpoint_url} (region us-east-1)"
    )
    assert ws.written() == []


@pytest.mark.spark
@pytest.mark.slow
def test_unknown_stream_through_spark_submit(
    ws: Workspace, moto_server: MotoServer, unique_name: str
) -> None:
    path = toml_file(ws, f'stream_name = "{unique_name}"\n')
    res = cli_run(path, "--endpoint-url", moto_server.endpoint_url)
    assert res.returncode == 1, res.stderr[-2000:]
    # spark-submit merges the Python driver's stderr into its stdout.
    assert (
        f"kinesis-spout job: failed: stream {unique_name!r} not found at "
        f"{moto_server.endpoint_url} (region us-east-1)"
    ) in res.stdout + res.stderr
    assert ws.written() == []


@pytest.mark.spark
def test_unreachable_endpoint(ws: Workspace, spark: Any, unique_name: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EndpointUnreachableError) as info:
        run_driver(ws, spark, stream_name=unique_name, endpoint_url=url)
    assert str(info.value).startswith(
        f"cannot reach Kinesis at {url} (stream {unique_name!r}, region us-east-1); "
        "check endpoint_url / AWS_ENDPOINT_URL_KINESIS"
    )
    assert ws.written() == []


class AuthMoto(MotoServer):
    """moto checking credentials (``INITIAL_NO_AUTH_ACTION_COUNT=0``): unknown keys are refused."""

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "INITIAL_NO_AUTH_ACTION_COUNT": "0"}


@pytest.fixture(scope="module")
def auth_moto() -> Iterator[AuthMoto]:
    with AuthMoto() as server:
        yield server


@pytest.mark.spark
def test_bad_credentials_are_refused_naming_the_reason(
    ws: Workspace, spark: Any, auth_moto: AuthMoto, unique_name: str
) -> None:
    with pytest.raises(KinesisError) as info:
        run_driver(ws, spark, stream_name=unique_name, endpoint_url=auth_moto.endpoint_url)
    msg = str(info.value)
    assert msg.startswith(f"DescribeStreamSummary {unique_name}: ")
    assert "InvalidClientTokenId" in msg
    assert "The security token included in the request is invalid." in msg
    assert ws.written() == []


@pytest.mark.spark
def test_bad_credentials_are_a_credentials_error(
    ws: Workspace, spark: Any, auth_moto: AuthMoto, unique_name: str
) -> None:
    with pytest.raises(CredentialsError, match=r"credentials rejected \(InvalidClientTokenId\)"):
        run_driver(ws, spark, stream_name=unique_name, endpoint_url=auth_moto.endpoint_url)


# --- ZooKeeper: unreachable, a corrupt node, a node of another stream -------------------------


@pytest.mark.spark
def test_unreachable_zookeeper(
    ws: Workspace,
    spark: Any,
    moto_server: MotoServer,
    filled_stream: list[tuple[str, str]],
    unique_name: str,
) -> None:
    url = f"zk://127.0.0.1:{free_port()}/kinesis-spout"
    with pytest.raises(CheckpointStoreUnavailableError) as info:
        run_driver(
            ws,
            spark,
            stream_name=unique_name,
            endpoint_url=moto_server.endpoint_url,
            checkpoint_store=url,
        )
    assert str(info.value) == f"ZooKeeper {url} not reachable within 15s"
    assert ws.written() == []


@pytest.fixture
def raw_zk(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    client = KazooClient(zookeeper.hosts)
    client.start()
    yield client
    client.stop()
    client.close()


def zk_tree(client: KazooClient, path: str) -> dict[str, tuple[bytes, int]]:
    """Every node under ``path``: its bytes and data version."""
    out: dict[str, tuple[bytes, int]] = {}
    if not client.exists(path):
        return out
    for child in client.get_children(path):
        p = f"{path}/{child}"
        data, stat = client.get(p)
        out[p] = (data, stat.version)
        out.update(zk_tree(client, p))
    return out


def checkpoint_json(stream: str, shard: str, job: str, sequence: str) -> bytes:
    return json.dumps(
        {
            "stream": stream,
            "shard": shard,
            "sequence": sequence,
            "sub_sequence": 0,
            "shard_end": False,
            "job": job,
            "owner": "someone",
            "updated_at": None,
        }
    ).encode()


@pytest.mark.spark
@pytest.mark.parametrize(
    ("case", "stored", "message"),
    [
        ("not JSON", b"\x00garbage{", "is not valid JSON"),
        ("cut JSON", b'{"stream": "x", "sha', "is not valid JSON"),
        ("bad sequence", None, "has a bad position: sequence must contain decimal digits only"),
    ],
)
def test_corrupt_checkpoint_node(
    ws: Workspace,
    spark: Any,
    moto_server: MotoServer,
    zookeeper: ZooKeeperServer,
    raw_zk: KazooClient,
    filled_stream: list[tuple[str, str]],
    unique_name: str,
    case: str,
    stored: bytes | None,
    message: str,
) -> None:
    root = f"/tests/{unique_name}"
    path = f"{root}/job/{unique_name}/{SHARD0}"
    data = stored if stored is not None else checkpoint_json(unique_name, SHARD0, "job", "12x")
    raw_zk.create(path, data, makepath=True)
    before = zk_tree(raw_zk, root)
    with pytest.raises(CorruptCheckpointError) as info:
        run_driver(
            ws,
            spark,
            stream_name=unique_name,
            job_name="job",
            endpoint_url=moto_server.endpoint_url,
            checkpoint_store=zookeeper.url(root),
        )
    assert str(info.value).startswith(f"checkpoint at {path} ")
    assert message in str(info.value)
    assert zk_tree(raw_zk, root) == before  # the bad node is kept as it was, nothing added
    assert ws.written() == []


@pytest.mark.spark
@pytest.mark.parametrize("foreign", ["stream", "job"])
def test_checkpoint_of_another_stream_or_job(
    ws: Workspace,
    spark: Any,
    moto_server: MotoServer,
    zookeeper: ZooKeeperServer,
    raw_zk: KazooClient,
    filled_stream: list[tuple[str, str]],
    unique_name: str,
    foreign: str,
) -> None:
    # Someone copied another stream's (or job's) checkpoint node to this path.
    root = f"/tests/{unique_name}"
    path = f"{root}/job/{unique_name}/{SHARD0}"
    stream, job = ("payments", "job") if foreign == "stream" else (unique_name, "reporting")
    last_seq = max(int(seq) for shard, seq in filled_stream if shard == SHARD0)
    raw_zk.create(path, checkpoint_json(stream, SHARD0, job, str(last_seq)), makepath=True)
    before = zk_tree(raw_zk, root)
    with pytest.raises(CorruptCheckpointError) as info:
        run_driver(
            ws,
            spark,
            stream_name=unique_name,
            job_name="job",
            endpoint_url=moto_server.endpoint_url,
            checkpoint_store=zookeeper.url(root),
        )
    expected = {
        "stream": f"belongs to stream 'payments', not {unique_name!r}",
        "job": "belongs to job 'reporting', not 'job'",
    }[foreign]
    assert str(info.value) == (
        f"checkpoint at {path} {expected}: refusing to use another stream's or job's position"
    )
    assert zk_tree(raw_zk, root) == before
    assert ws.written() == []
