"""The pure parts of the DynamoDB store: its URL, its keys, the IAM actions of a call, and
where a ``dynamodb://`` URL is accepted (config, streaming options, cluster deploy mode)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kinesis_spout.checkpoint.dynamodb_layout import (
    DEFAULT_LEASE_SECONDS,
    DynamoUrl,
    JobKeys,
    batch_sk,
    item_where,
)
from kinesis_spout.checkpoint.dynamodb_table import iam_action
from kinesis_spout.checkpoint.factory import parse_store_url
from kinesis_spout.config import SpoutConfig
from kinesis_spout.errors import ConfigError
from kinesis_spout.spark.launch.deploy import check_deploy_mode
from kinesis_spout.streaming.options import parse_options


def test_a_url_names_a_table_and_may_set_the_lease_length() -> None:
    assert DynamoUrl.parse("dynamodb://kinesis-spout") == DynamoUrl("kinesis-spout")
    assert DynamoUrl.parse("dynamodb://kinesis-spout").lease_seconds == DEFAULT_LEASE_SECONDS
    url = DynamoUrl.parse("dynamodb://t.1_x?lease_seconds=2.5")
    assert (url.table, url.lease_seconds, str(url)) == (
        "t.1_x",
        2.5,
        "dynamodb://t.1_x?lease_seconds=2.5",
    )
    assert parse_store_url("dynamodb://tbl") == ("dynamodb", "tbl")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("dynamodb://ab", "a table name of 3 to 255"),
        ("dynamodb://a/b", "a table name of 3 to 255"),
        ("dynamodb://", "a table name of 3 to 255"),
        ("dynamodb://tbl?lease_seconds=0.5", "lease_seconds: a number of seconds from 1 to 3600"),
        ("dynamodb://tbl?lease_seconds=ten", "lease_seconds: a number of seconds from 1 to 3600"),
        ("dynamodb://tbl?region=eu-west-1", "no parameter 'region'"),
        ("dynamo://tbl", "dynamodb://TABLE"),
    ],
)
def test_a_bad_url_is_an_error_naming_the_field_and_what_is_allowed(url: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        DynamoUrl.parse(url)
    assert info.value.field == "checkpoint_store" and message in str(info.value)


def test_every_item_of_a_job_has_a_key_of_its_own() -> None:
    keys = JobKeys("billing")
    assert keys.lease() == {"pk": "billing", "sk": "@job-lease"}
    assert keys.checkpoint("orders", "shardId-000000000001") == {
        "pk": "billing/orders",
        "sk": "shardId-000000000001",
    }
    assert keys.identity("orders") == {"pk": "billing/orders", "sk": "@identity"}
    assert keys.retired("orders", "2026-01-01T00:00:00+00:00") == (
        "billing/orders/@retired/2026-01-01T00-00-00-00-00"
    )
    assert keys.batches("orders", "r1") == "billing/orders/@batches/run-r1"
    assert keys.batches("orders", "") == "billing/orders/@batches"
    assert batch_sk(9, "s") < batch_sk(10, "s") < "@floor"  # batches sort by number
    assert item_where("t", keys.lease()) == "dynamodb://t/billing/@job-lease"
    for field, bad in (("job_name", "a/b"), ("job_name", "@x"), ("stream_name", "")):
        with pytest.raises(ConfigError, match=field):
            JobKeys(bad).lease() if field == "job_name" else keys.stream(bad)


def test_a_transaction_needs_the_actions_it_holds() -> None:
    assert iam_action("PutItem") == ["dynamodb:PutItem"]
    items = [{"ConditionCheck": {}}, {"Put": {}}, {"Put": {}}]
    assert iam_action("TransactWriteItems", {"TransactItems": items}) == [
        "dynamodb:ConditionCheckItem",
        "dynamodb:PutItem",
    ]


def test_a_dynamodb_store_is_a_config_value_a_streaming_option_and_cluster_ready() -> None:
    cfg = SpoutConfig(checkpoint_store="dynamodb://kinesis-spout", dead_letter="none")
    check_deploy_mode(cfg, "cluster")  # the driver may move: the table does not
    with pytest.raises(ConfigError, match="checkpoint_store"):
        check_deploy_mode(cfg.replace(checkpoint_store="file:///tmp/cp"), "cluster")
    options = {"streamname": "s", "checkpointstore": "dynamodb://kinesis-spout"}
    assert parse_options(options, env={}).checkpoint_store == "dynamodb://kinesis-spout"
    with pytest.raises(ConfigError) as info:
        parse_options({**options, "checkpointstore": "dynamodb://x"}, env={})
    assert info.value.field == "checkpointStore" and "table name" in str(info.value)


def test_coordinated_workers_need_zookeeper_and_say_so_for_a_dynamodb_store(
    tmp_path: Path,
) -> None:
    from kinesis_spout.coordination.worker import run_worker
    from kinesis_spout.multilang.coordinated import require_shared_store

    cfg = SpoutConfig(checkpoint_store="dynamodb://kinesis-spout")
    with pytest.raises(ConfigError) as info:
        run_worker(cfg, tmp_path, stop=threading.Event())
    assert info.value.field == "checkpoint_store" and "ZooKeeper" in str(info.value)
    assert "dynamodb:// store holds one reader per job" in str(info.value)
    with pytest.raises(ConfigError, match="dynamodb:// store holds one reader per job"):
        require_shared_store(cfg, 2, "kinesis")
    require_shared_store(cfg, 1, "kinesis")  # one task: the job lease is enough
