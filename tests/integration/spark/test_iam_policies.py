"""The IAM policies of docs/deploy.md (docs/iam/*.json) allow exactly what each mode calls.

Each mode's end-to-end run writes every AWS call it makes to the project's call log
(``KSPOUT_CALL_LOG``: a botocore ``before-call`` handler on every session the
project makes): on the driver through this process's environment, on the executors
through the Python workers' (:func:`~devkit.awscalls.executor_env`). The actions those
calls need are then exactly the actions its policy allows for that service: none
missing (the job would be refused on AWS), none the mode never calls (least privilege).

A mode is one entry of :data:`MODES`: its policy file, the service whose actions it
grants, and the run that exercises it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from spark_job_helpers import POISON, not_poison, record_deliveries

from devkit.awscalls import executor_env, read_call_log
from devkit.localstack import LocalStackServer
from kinesis_spout.aws import CALL_LOG_ENV
from kinesis_spout.cli import main as cli_main
from kinesis_spout.spark import dataframe_transform, run_job
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import (
    create_stream,
    emulator_client,
    make_payloads,
    put_records,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]

IAM_DIR = Path(__file__).resolve().parents[3] / "docs" / "iam"

S3_ACTIONS = {
    "ListObjectsV2": "s3:ListBucket",
    "ListObjects": "s3:ListBucket",
    "HeadBucket": "s3:ListBucket",
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "PutObject": "s3:PutObject",
    "DeleteObject": "s3:DeleteObject",
    "DeleteObjects": "s3:DeleteObject",
}
"""IAM actions of S3 operations (named apart); Kinesis operations are their own actions."""

DYNAMODB_TRANSACTION = {"dynamodb:ConditionCheckItem", "dynamodb:PutItem"}
"""The actions of the DynamoDB store's one transaction, checkpoints written under the job
lease (a ConditionCheck of the lease's item and a Put per checkpoint): the call log names
the operation only; test_dynamodb_iam.py finds each transaction's actions from its items.
Other DynamoDB operations are their own actions."""


def iam_actions(call: str) -> set[str]:
    """The IAM actions a ``service:Operation`` call needs."""
    service, _, operation = call.partition(":")
    if service == "s3":
        return {S3_ACTIONS[operation]}
    return DYNAMODB_TRANSACTION if call == "dynamodb:TransactWriteItems" else {call}


def allowed_actions(policy: dict[str, Any], service: str) -> set[str]:
    """The actions of ``service`` that the policy's Allow statements grant."""
    out: set[str] = set()
    assert policy["Version"] == "2012-10-17"
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow", statement
        assert statement["Resource"] not in ("*", ["*"]), f"every resource: {statement}"
        actions = statement["Action"]
        for action in [actions] if isinstance(actions, str) else actions:
            assert "*" not in action, f"a wildcard action: {action}"
            if action.startswith(f"{service}:"):
                out.add(action)
    return out


@dataclass
class Scene:
    """What a mode's run gets: the servers, its names and where its calls are logged."""

    spark: Any
    job_config: Callable[..., Any]
    name: str
    tmp: Path
    request: pytest.FixtureRequest
    monkeypatch: pytest.MonkeyPatch

    @property
    def moto(self) -> MotoServer:
        server: MotoServer = self.request.getfixturevalue("moto_server")
        return server

    @contextlib.contextmanager
    def logged(self) -> Iterator[None]:
        """The calls made within the block go to the call log, the executors' too."""
        log = str(self.tmp / "calls.log")
        with executor_env(self.spark, **{CALL_LOG_ENV: log}):
            self.monkeypatch.setenv(CALL_LOG_ENV, log)
            try:
                yield
            finally:
                self.monkeypatch.delenv(CALL_LOG_ENV)

    def calls(self) -> set[str]:
        return read_call_log(self.tmp / "calls.log")

    def run_job(self, cfg: Any, process: Any = None) -> Any:
        """The Spark job of ``cfg`` with ``process``, by default a per-record function
        failing POISON records."""
        if process is None:
            deliveries = self.tmp / "deliveries"
            deliveries.mkdir(exist_ok=True)
            process = record_deliveries(str(deliveries))
        return run_job(cfg, process, spark=self.spark)

    def cli(self, *args: str) -> None:
        assert cli_main(list(args)) == 0, args

    def bucket(self) -> str:
        """A new S3 bucket on moto's server (``AWS_ENDPOINT_URL_S3`` set to it)."""
        self.monkeypatch.setenv("AWS_ENDPOINT_URL_S3", self.moto.endpoint_url)
        s3: Any = boto3.client("s3", endpoint_url=self.moto.endpoint_url, region_name="us-east-1")
        s3.create_bucket(Bucket=self.name.lower()[:50])
        return self.name.lower()[:50]

    def stream(self, client: Any, poison: int = 2) -> None:
        """The test's stream, 2 shards, 60 records of which ``poison`` are POISON."""
        create_stream(client, self.name, 2)
        items = make_payloads(60, 50)
        for i in range(poison):
            items[10 * i + 3] = (items[10 * i + 3][0], POISON + b"-%d" % i)
        put_records(client, self.name, items)


def polling(scene: Scene) -> None:
    """The Spark job reading by GetRecords (executor reads), then ``status``."""
    scene.stream(emulator_client(scene.moto.endpoint_url))
    cfg = scene.job_config(retry_limit=0)
    with scene.logged():
        assert scene.run_job(cfg).dead_lettered == 2
        scene.cli(
            "status",
            f"--stream-name={scene.name}",
            f"--job-name={scene.name}",
            f"--endpoint-url={scene.moto.endpoint_url}",
            f"--checkpoint-store={cfg.checkpoint_store}",
        )


def enhanced_fan_out(scene: Scene) -> None:
    """The Spark job reading by enhanced fan-out (executor reads) on LocalStack's Kinesis,
    its consumer deregistered on close."""
    localstack: LocalStackServer = scene.request.getfixturevalue("localstack")
    scene.stream(emulator_client(localstack.endpoint_url))
    cfg = scene.job_config(
        endpoint_url=localstack.endpoint_url,
        consumer="efo",
        deregister_on_close=True,
        retry_limit=0,
        stop_when_idle=5.0,  # a LocalStack subscription can stay silent for seconds
    )
    with scene.logged():
        assert scene.run_job(cfg).dead_lettered == 2


def s3_dead_letters(scene: Scene) -> None:
    """Dead letters written to S3 by the Spark job, counted by ``status``, listed, re-driven
    and removed (``redrive --delete``)."""
    scene.stream(emulator_client(scene.moto.endpoint_url))
    target = f"s3://{scene.bucket()}/dead"
    cfg = scene.job_config(retry_limit=0, dead_letter=target)
    common = (f"--stream-name={scene.name}", f"--job-name={scene.name}", f"--dead-letter={target}")
    endpoint = f"--endpoint-url={scene.moto.endpoint_url}"
    with scene.logged():
        assert scene.run_job(cfg).dead_lettered == 2
        scene.cli("status", *common, endpoint, f"--checkpoint-store={cfg.checkpoint_store}")
        scene.cli("dead-letters", "list", *common)
        scene.cli("dead-letters", "redrive", "--delete", *common, endpoint)


def redrive(scene: Scene) -> None:
    """``dead-letters redrive`` of a directory's dead letters onto the stream."""
    scene.stream(emulator_client(scene.moto.endpoint_url))
    cfg = scene.job_config(retry_limit=0)
    assert scene.run_job(cfg).dead_lettered == 2  # its calls are polling's: not logged
    with scene.logged():
        scene.cli(
            "dead-letters",
            "redrive",
            f"--stream-name={scene.name}",
            f"--job-name={scene.name}",
            f"--endpoint-url={scene.moto.endpoint_url}",
            f"--dead-letter={cfg.dead_letter}",
        )


def dynamodb_store(scene: Scene) -> None:
    """The Spark job with a ``dynamodb://`` store (the table made on first use): its job
    lease, its checkpoints, the batch ends of a DataFrame transform's reads; then
    ``status`` and ``checkpoints``."""
    scene.stream(emulator_client(scene.moto.endpoint_url))
    url = f"dynamodb://{scene.name}"
    cfg = scene.job_config(retry_limit=0, checkpoint_store=url)
    common = (
        f"--stream-name={scene.name}",
        f"--job-name={scene.name}",
        f"--checkpoint-store={url}",
    )
    with scene.logged():
        assert scene.run_job(cfg, dataframe_transform(not_poison)).dead_lettered == 2
        scene.cli("status", *common, f"--endpoint-url={scene.moto.endpoint_url}")
        scene.cli("checkpoints", *common)


@dataclass(frozen=True)
class Mode:
    policy: str
    """The policy's file in docs/iam/."""
    service: str
    """The service whose actions the policy grants."""
    run: Callable[[Scene], None]


MODES = {
    "polling": Mode("polling.json", "kinesis", polling),
    "enhanced fan-out": Mode("enhanced-fan-out.json", "kinesis", enhanced_fan_out),
    "re-drive": Mode("redrive.json", "kinesis", redrive),
    "S3 dead letters": Mode("s3-dead-letters.json", "s3", s3_dead_letters),
    "DynamoDB store": Mode("dynamodb-store.json", "dynamodb", dynamodb_store),
}


@pytest.fixture
def scene(
    spark: Any,
    job_config: Callable[..., Any],
    unique_name: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Scene]:
    yield Scene(spark, job_config, unique_name, tmp_path, request, monkeypatch)


@pytest.mark.parametrize("mode", MODES)
def test_each_policy_allows_exactly_the_calls_its_mode_makes(scene: Scene, mode: str) -> None:
    m = MODES[mode]
    m.run(scene)
    calls = scene.calls()
    made = {a for c in calls if c.startswith(f"{m.service}:") for a in iam_actions(c)}
    policy = json.loads((IAM_DIR / m.policy).read_text())
    assert made == allowed_actions(policy, m.service)
