"""The Prometheus endpoint of the spout and of the coordination worker, scraped over
HTTP while they read the moto server (no Spark); and the endpoint's bad input: a
taken ``metrics_port`` stops every entry point before it reads or leases anything,
an invalid one is a config error naming the field.

The Spark job's endpoint is tested in ``spark/test_metrics_job.py``, the multilang
process' in ``multilang/test_shellspout_metrics.py``.
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kit import spout_config

from devkit.holders import start_lease_holder
from devkit.scrape import Scrape, scrape, wait_for_scrape
from kinesis_spout.checkpoint.joblease import JobLeaseHeldError
from kinesis_spout.config import SpoutConfig
from kinesis_spout.coordination.worker import run_worker
from kinesis_spout.errors import ConfigError
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.multilang.coordinated import CoordinatedSpout
from kinesis_spout.observability import MetricsPortInUseError, check_port_free
from kinesis_spout.observability.names import BY_NAME, MODES
from kinesis_spout.records import Record
from kinesis_spout.spark import job
from kinesis_spout.spark.submit import job_environment
from kinesis_spout.spout import KinesisSpout
from kinesis_spout.testing.servers import MotoServer, ZooKeeperServer, free_port
from kinesis_spout.testing.streams import create_stream, make_payloads, put_records

pytestmark = pytest.mark.integration

RECORDS = "kinesis_spout_records_total"
READ = "kinesis_spout_records_read_total"
POISON = b"POISON"


def url_of(port: int) -> str:
    return f"http://127.0.0.1:{port}/metrics"


def config_on_moto(moto: MotoServer, stream: str, tmp_path: Path, **kw: Any) -> SpoutConfig:
    """Job ``stream`` reading ``stream`` on ``moto``, files under ``tmp_path``."""
    values: dict[str, Any] = {
        "stream_name": stream,
        "job_name": stream,
        "endpoint_url": moto.endpoint_url,
        "checkpoint_interval": 0.2,
        "retry_limit": 1,
    }
    return spout_config(under=tmp_path, **{**values, **kw})


def put_round(client: Any, stream: str, n: int, prefix: str, poison: int) -> dict[str, int]:
    """``n`` records (the first ``poison`` of them fail every time); records per shard."""
    items = make_payloads(n, 64, prefix)
    items = [(pk, POISON + data if i < poison else data) for i, (pk, data) in enumerate(items)]
    per_shard: dict[str, int] = {}
    for shard, _seq in put_records(client, stream, items):
        per_shard[shard] = per_shard.get(shard, 0) + 1
    return per_shard


def read_all(sp: KinesisSpout, expected_done: int) -> None:
    """Ack every record, fail the poison ones, until ``expected_done`` are done."""
    deadline = time.monotonic() + 60
    while True:
        batch: list[Record] = sp.next_batch(500)
        sp.ack_many(r for r in batch if not r.data.startswith(POISON))
        sp.fail_many((r, "poison") for r in batch if r.data.startswith(POISON))
        stats = sp.stats()
        if stats.acked + stats.dead_lettered >= expected_done and not sp.in_flight:
            sp.checkpoint(force=True)
            return
        assert time.monotonic() < deadline, stats
        if not batch:
            time.sleep(min(sp.poll_delay(), 0.05))


def outcomes(s: Scrape) -> dict[str, float]:
    return s.by("outcome", RECORDS)


def listed_families(url: str) -> set[str]:
    """The metric families the endpoint lists (its ``# TYPE`` lines), samples or not;
    a counter's without its ``_total`` (which prometheus_client versions differ on)."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    return {name.removesuffix("_total") for name in types}


def test_the_spout_serves_its_metrics_from_open_to_close(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    create_stream(moto_client, unique_name, 2)
    first_put = put_round(moto_client, unique_name, 120, "a", poison=2)
    port = free_port()
    cfg = config_on_moto(moto_server, unique_name, tmp_path, metrics_port=port)
    sp = KinesisSpout(cfg, client=make_client(moto_server.endpoint_url))
    sp.open()
    try:
        read_all(sp, 120)
        first = scrape(url_of(port))
        assert outcomes(first) == {"acked": 118, "dead_lettered": 2, "expired": 0}
        assert first.sum(READ) == 120 and first.by("shard", READ) == first_put
        assert first.sum("kinesis_spout_retries_total") == 2
        assert first.sum("kinesis_spout_failures_total") == 4
        stats = sp.stats()
        assert (stats.read, stats.acked, stats.retried, stats.dead_lettered) == (120, 118, 2, 2)
        assert first.by("shard", "kinesis_spout_in_flight_records") == dict.fromkeys(first_put, 0)
        assert set(first.by("shard", "kinesis_spout_behind_latest_seconds")) == set(first_put)
        assert (
            first.sum("kinesis_spout_get_records_duration_seconds_count") >= 2
        )  # one per shard at least
        assert first.sum("kinesis_spout_checkpoint_writes_total") >= 2
        assert len(first.select("kinesis_spout_checkpoint_age_seconds")) == 1
        assert first.sum("process_cpu_seconds_total") > 0  # the process' own metrics too
        assert {s.labels["stream"] for s in first.select(RECORDS)} == {unique_name}
        families = listed_families(url_of(port))  # the spout's metrics only
        assert {"kinesis_spout_records", "kinesis_spout_in_flight_records"} <= families
        assert not families & {
            "kinesis_spout_lease_events",
            "kinesis_spout_rebalances",
            "kinesis_spout_batches",
            "kinesis_spout_streaming_input_rows",
        }

        put_round(moto_client, unique_name, 60, "b", poison=1)
        read_all(sp, 180)
        second = scrape(url_of(port))
        before, after = outcomes(first), outcomes(second)
        assert all(after[k] >= v for k, v in before.items())
        assert second.sum(READ) == 180 and after == {"acked": 177, "dead_lettered": 3, "expired": 0}
        assert second.sum("kinesis_spout_get_records_duration_seconds_count") > first.sum(
            "kinesis_spout_get_records_duration_seconds_count"
        )
    finally:
        sp.close()
    check_port_free(cfg)  # closed: the port is free again


STALE = b"STALE"


def read_counting(sp: KinesisSpout, expected_done: int) -> int:
    """Like :func:`read_all` (stale records fail too); the deliveries handed out."""
    deliveries, deadline = 0, time.monotonic() + 60
    while True:
        batch: list[Record] = sp.next_batch(500)
        deliveries += len(batch)
        bad = [r for r in batch if r.data.startswith((POISON, STALE))]
        sp.ack_many(r for r in batch if r not in bad)
        sp.fail_many((r, "bad") for r in bad)
        stats = sp.stats()
        if stats.acked + stats.dead_lettered >= expected_done and not sp.in_flight:
            return deliveries
        assert time.monotonic() < deadline, stats
        if not batch:
            time.sleep(min(sp.poll_delay(), 0.05))


def test_each_record_is_counted_once_under_one_outcome(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """``kinesis_spout_records_total`` counts each record once, when it is done, under one
    outcome (acked, dead_lettered: out of retries, expired: too old to retry): summed over
    ``outcome`` it is the records done, here every record read. Deliveries, failures and
    retries are counters of their own, and add up."""
    create_stream(moto_client, unique_name, 2)
    stale = [(f"s{i}", STALE + b"%d" % i) for i in range(3)]
    put_records(moto_client, unique_name, stale)
    too_old = time.monotonic() + 1.5
    while time.monotonic() < too_old:  # the stale records age past max_record_age (1 s)
        time.sleep(0.1)
    put_round(moto_client, unique_name, 40, "a", poison=4)
    port = free_port()
    cfg = config_on_moto(moto_server, unique_name, tmp_path, metrics_port=port, max_record_age=1)
    with KinesisSpout(cfg, client=make_client(moto_server.endpoint_url)) as sp:
        deliveries = read_counting(sp, 43)
        s = scrape(url_of(port))
    assert outcomes(s) == {"acked": 36, "dead_lettered": 4, "expired": 3}
    assert s.sum(RECORDS) == s.sum("kinesis_spout_records_read_total") == 43
    retries = s.sum("kinesis_spout_retries_total")
    assert retries == 4  # retry_limit 1: each poison record once more; stale ones never
    assert s.sum("kinesis_spout_records_read_total") + retries == deliveries
    assert s.sum("kinesis_spout_failures_total") == retries + 4 + 3  # retried or given up


def test_a_taken_port_fails_the_spout_before_it_reads_anything(
    moto_server: MotoServer, unique_name: str, tmp_path: Path
) -> None:
    with listening() as port:
        # The stream does not exist: the port is checked before the stream is.
        cfg = config_on_moto(moto_server, unique_name, tmp_path, metrics_port=port)
        sp = KinesisSpout(cfg)
        with pytest.raises(MetricsPortInUseError) as info:
            sp.open()
    assert str(info.value) == (
        f"invalid config metrics_port={port}: a free port: 127.0.0.1:{port} is already in use "
        "by another process (pick another metrics_port, or leave it unset)"
    )
    assert info.value.field == "metrics_port"
    left = [p for p in (tmp_path / "checkpoints").rglob("*") if p.is_file()]
    assert [(p.name, p.stat().st_size) for p in left] == [(".job.lock", 0)]  # released


def test_a_second_copy_of_a_running_spout_is_named_by_its_lease_not_its_port(
    moto_server: MotoServer, unique_name: str, tmp_path: Path
) -> None:
    """The first copy holds the job lease and the port: the second one's error is the
    lease's (it once was the port's, hiding the cause), naming the config key to wait."""
    cfg = config_on_moto(moto_server, unique_name, tmp_path)
    holder = start_lease_holder(cfg.checkpoint_store, cfg.job_name)
    try:
        with listening() as port:
            with pytest.raises(JobLeaseHeldError) as info:
                KinesisSpout(cfg.replace(metrics_port=port)).open()
            said = str(info.value)
            assert said.startswith(f"job {unique_name!r} is already running (lease "), said
            assert said.endswith("stop it, or set wait_for_lease = true to take over when it ends")
            res = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "kinesis_spout.cli",
                    "run",
                    "--config",
                    str(
                        job_toml(
                            tmp_path,
                            unique_name,
                            moto_server.endpoint_url,
                            f'job_name = "{unique_name}"\nmetrics_port = {port}\n',
                        )
                    ),
                ],
                capture_output=True,
                text=True,
                timeout=120,
                env=job_environment(),
            )
    finally:
        holder.kill()
        holder.wait()
    assert res.returncode == 3, res.stderr
    first = res.stderr.splitlines()[0]
    assert first.startswith(
        f"kinesis-spout run: error: job {unique_name!r} is already running (lease "
    ), res.stderr
    assert first.endswith("stop it, or pass --wait-for-lease to take over when it ends")


def test_a_storm_task_that_cannot_reach_zookeeper_lets_its_metrics_port_go(
    tmp_path: Path,
) -> None:
    port = free_port()
    cfg = spout_config(
        stream_name="orders",
        checkpoint_store="zk://127.0.0.1:1/kinesis-spout",
        zk_auth="user:",  # refused before any connection: no password
        metrics_port=port,
    )
    with pytest.raises(ConfigError) as info:
        CoordinatedSpout(cfg)
    assert info.value.field == "zk_auth"
    check_port_free(cfg)  # the endpoint it had started is closed


def test_the_coordination_worker_serves_the_spout_and_lease_metrics(
    moto_server: MotoServer,
    moto_client: Any,
    zookeeper: ZooKeeperServer,
    unique_name: str,
    tmp_path: Path,
) -> None:
    create_stream(moto_client, unique_name, 2)
    put_round(moto_client, unique_name, 80, "a", poison=0)
    port = free_port()
    cfg = config_on_moto(
        moto_server,
        unique_name,
        tmp_path,
        metrics_port=port,
        checkpoint_store=zookeeper.url(f"/{unique_name}"),
        worker_id="w1",
    )
    stop = threading.Event()
    codes: list[int] = []
    worker = threading.Thread(
        target=lambda: codes.append(run_worker(cfg, tmp_path / "out", stop=stop)), daemon=True
    )
    worker.start()
    try:
        first = wait_for_scrape(
            url_of(port),
            lambda s: s.sum(RECORDS, outcome="acked") == 80,
            timeout=60,
            what="80 records acked",
        )
        assert first.sum("kinesis_spout_lease_events_total", event="acquired") == 2
        assert first.sum("kinesis_spout_rebalances_total") >= 1
        put_round(moto_client, unique_name, 40, "b", poison=0)
        second = wait_for_scrape(
            url_of(port),
            lambda s: s.sum(RECORDS, outcome="acked") == 120,
            timeout=60,
            what="120 records acked",
        )
        assert second.sum(READ) == 120
        families = listed_families(url_of(port))
        assert {"kinesis_spout_lease_events", "kinesis_spout_rebalances"} <= families
        assert "kinesis_spout_batches" not in families  # the worker has no micro-batches
    finally:
        stop.set()
        worker.join(60)
    assert codes == [0]
    lines = (tmp_path / "out" / "w1.records").read_text().splitlines()
    assert len(lines) == 120
    check_port_free(cfg)  # the worker let its port go when it left


# --- bad input -------------------------------------------------------------------------


@pytest.fixture
def taken_port() -> Iterator[int]:
    with listening() as port:
        yield port


@contextlib.contextmanager
def listening() -> Iterator[int]:
    """A socket listening on a free loopback port: the port is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def job_toml(tmp_path: Path, stream: str, endpoint: str, extra: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(
        f'stream_name = "{stream}"\nendpoint_url = "{endpoint}"\n'
        f'checkpoint_store = "file://{tmp_path / "checkpoints"}"\n'
        f'dead_letter = "{tmp_path / "dead"}"\n'
        'process = "devkit.chaos_process:process"\n' + extra
    )
    return path


def test_a_taken_port_stops_kinesis_spout_run_before_spark_submit(
    taken_port: int, moto_server: MotoServer, unique_name: str, tmp_path: Path
) -> None:
    config = job_toml(tmp_path, unique_name, moto_server.endpoint_url, "")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "kinesis_spout.cli",
            "run",
            "--config",
            str(config),
            "--metrics-port",
            str(taken_port),
            "--spark-submit",
            "/nonexistent/spark-submit",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=job_environment(),
    )
    assert res.returncode == 2, res.stderr
    # The port is checked before spark-submit is even looked for.
    assert (
        f"kinesis-spout run: error: invalid config metrics_port={taken_port}: a free port: "
        f"127.0.0.1:{taken_port} is already in use"
    ) in res.stderr
    assert "spark-submit" not in res.stderr
    assert not (tmp_path / "checkpoints").exists()


def test_a_taken_port_stops_the_job_before_its_lease_and_spark(
    taken_port: int,
    moto_server: MotoServer,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = job_toml(tmp_path, unique_name, moto_server.endpoint_url, "")
    code = job.main(["--config", str(config), "--metrics-port", str(taken_port)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert (
        f"kinesis-spout job: error: invalid config metrics_port={taken_port}: a free port: "
        f"127.0.0.1:{taken_port} is already in use"
    ) in err
    assert not (tmp_path / "checkpoints").exists()  # no job lease taken (its lock file)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("metrics_port = 65536", "invalid config metrics_port=65536: a TCP port between 1"),
        ('metrics_port = "nine"', "invalid config metrics_port='nine': expected an integer"),
        ('metrics_host = ""', "invalid config metrics_host='': an address or host name"),
    ],
)
def test_an_invalid_metrics_setting_is_refused_naming_the_field(
    moto_server: MotoServer, unique_name: str, tmp_path: Path, line: str, message: str
) -> None:
    config = job_toml(tmp_path, unique_name, moto_server.endpoint_url, line + "\n")
    res = subprocess.run(
        [sys.executable, "-m", "kinesis_spout.cli", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env=job_environment(),
    )
    assert res.returncode == 2, res.stderr
    assert f"kinesis-spout run: error: {message}" in res.stderr
    assert not (tmp_path / "checkpoints").exists()


def documented_families() -> set[str]:
    """The Prometheus names of the table in docs/metrics.md."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    return set(re.findall(r"^\| `(kinesis_spout_[a-z_]+)` \|", docs, flags=re.M))


def test_a_fresh_endpoint_has_a_sample_of_every_documented_series_and_no_created_series(
    moto_server: MotoServer, moto_client: Any, unique_name: str, tmp_path: Path
) -> None:
    """A spout on an idle stream, scraped after its open and its first poll: every series
    its mode lists has a sample (counters at 0, the histogram empty, in flight and the
    checkpoint age known), so ``rate()`` and ``absent()`` alerts work from the start."""
    create_stream(moto_client, unique_name, 2)
    port = free_port()
    cfg = config_on_moto(moto_server, unique_name, tmp_path, metrics_port=port)
    with KinesisSpout(cfg) as sp:
        assert sp.next_batch(10) == []  # one GetRecords per shard: nothing there
        s = scrape(url_of(port))
    families = {BY_NAME[n].family for n in MODES["spout"]}
    assert families <= documented_families()
    for family in sorted(families):
        base = family.removesuffix("_total")
        samples = [x for x in s.samples if x.name in (family, base + "_count")]
        assert samples, f"{family}: no sample on a fresh endpoint"
    for name, kinds in (("kinesis_spout_errors_total", 4), ("kinesis_spout_records_total", 3)):
        assert len(s.by("shard", name)) == 2 and len(s.select(name)) == 2 * kinds, name
    assert s.sum("kinesis_spout_throttles_total") == 0
    assert len(s.select("kinesis_spout_in_flight_records")) == 2
    assert len(s.select("kinesis_spout_checkpoint_age_seconds")) == 1
    assert s.select("kinesis_spout_get_records_seconds_count")  # the deprecated name, still
    assert not [x.name for x in s.samples if x.name.endswith("_created")]
    assert "_created" not in s.text
