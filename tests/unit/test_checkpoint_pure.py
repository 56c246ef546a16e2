"""Pure parts of the checkpoint stores: codec, monotonicity rule, URL and paths."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_spout.checkpoint.base import MemoryCheckpointStore, check_forward
from kinesis_spout.checkpoint.codec import decode_checkpoint, encode_checkpoint
from kinesis_spout.checkpoint.factory import open_store
from kinesis_spout.checkpoint.zk_layout import SecretFilter as _SecretFilter
from kinesis_spout.checkpoint.zk_layout import ZkPaths, ZkUrl
from kinesis_spout.errors import (
    CheckpointError,
    ConfigError,
    CorruptCheckpointError,
    StaleCheckpointError,
)
from kinesis_spout.records import Checkpoint

WHERE = dict(where="/r/job/orders/shardId-1", stream="orders", shard="shardId-1", job="job")


def cp(seq: str | None, sub: int = 0, end: bool = False) -> Checkpoint:
    return Checkpoint("orders", "shardId-1", seq, sub, shard_end=end, job_name="job", owner="w")


# --- codec ---------------------------------------------------------------------------


@given(
    st.integers(0, 10**56).map(str) | st.none(),
    st.integers(0, 2**31),
    st.booleans(),
)
def test_codec_round_trip(seq: str | None, sub: int, end: bool) -> None:
    if seq is None:
        end = True
    original = Checkpoint(
        "orders", "shardId-1", seq, sub, end, "job", "w", datetime(2026, 1, 31, tzinfo=UTC)
    )
    assert decode_checkpoint(encode_checkpoint(original), **WHERE) == original


def test_stored_form_is_the_documented_json() -> None:
    obj = json.loads(
        encode_checkpoint(cp("49590338271490256608559692538361571095921575989136588898"))
    )
    assert obj == {
        "stream": "orders",
        "shard": "shardId-1",
        "sequence": "49590338271490256608559692538361571095921575989136588898",
        "sub_sequence": 0,
        "shard_end": False,
        "job": "job",
        "owner": "w",
        "updated_at": None,
    }


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"stream": "orders"}', "lacks field"),
    ],
)
def test_codec_rejects_garbage_naming_where(data: bytes, message: str) -> None:
    with pytest.raises(CorruptCheckpointError, match=message) as info:
        decode_checkpoint(data, **WHERE)
    assert "/r/job/orders/shardId-1" in str(info.value)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("stream", "payments", "stream 'payments', not 'orders'"),
        ("shard", "shardId-2", "shard 'shardId-2', not 'shardId-1'"),
        ("job", "other", "job 'other', not 'job'"),
        ("sequence", "12a", "bad position"),
        ("sequence", 12, "bad position"),
        ("sub_sequence", -1, "bad position"),
        ("shard_end", "no", "shard_end='no'"),
        ("updated_at", "yesterday", "updated_at='yesterday'"),
        ("owner", 5, "owner=5"),
    ],
)
def test_codec_rejects_foreign_or_malformed_fields(field: str, value: object, message: str) -> None:
    obj = json.loads(encode_checkpoint(cp("10")))
    obj[field] = value
    with pytest.raises(CorruptCheckpointError, match=message):
        decode_checkpoint(json.dumps(obj).encode(), **WHERE)


def test_codec_rejects_no_position_without_shard_end() -> None:
    obj = json.loads(encode_checkpoint(cp("10")))
    obj["sequence"] = None
    with pytest.raises(CorruptCheckpointError, match="nothing to resume from"):
        decode_checkpoint(json.dumps(obj), **WHERE)


# --- monotonicity -------------------------------------------------------------------------


def test_check_forward() -> None:
    assert check_forward(None, cp("1"))
    assert check_forward(cp("9"), cp("10"))  # numeric, not lexical
    assert check_forward(cp("10", 1), cp("10", 2))
    assert not check_forward(cp("10"), cp("10"))
    assert check_forward(cp("10"), cp("10", end=True))
    assert not check_forward(cp("10", end=True), cp(None, end=True))
    with pytest.raises(StaleCheckpointError, match="backwards"):
        check_forward(cp("10"), cp("9"))
    with pytest.raises(StaleCheckpointError, match="shard end"):
        check_forward(cp("10", end=True), cp("11"))


def test_memory_store_follows_the_contract() -> None:
    store = open_store("memory://", "job", owner="w1")
    assert isinstance(store, MemoryCheckpointStore)
    assert store.save(cp("5")).owner == "w"
    with pytest.raises(StaleCheckpointError):
        store.save(cp("4"))
    assert store.mark_ended("orders", "shardId-1", "w2").shard_end
    store.close()
    with pytest.raises(CheckpointError, match="closed"):
        store.load("orders")


def test_open_store_rejects_unknown_schemes() -> None:
    with pytest.raises(ConfigError, match="checkpoint_store"):
        open_store("s3://bucket", "job")


# --- ZooKeeper URL and layout ----------------------------------------------------------------


def test_zk_url_parse() -> None:
    u = ZkUrl.parse("zk://10.0.0.1:2181,zk2.example:2182/kinesis/prod/")
    assert (u.hosts, u.root) == ("10.0.0.1:2181,zk2.example:2182", "/kinesis/prod")
    assert str(u) == "zk://10.0.0.1:2181,zk2.example:2182/kinesis/prod"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("zk://127.0.0.1:2181", "a root path"),
        ("zk://127.0.0.1:2181/", "a root path"),
        ("zk:///root", "host:port"),
        ("zk://127.0.0.1/root", "host:port"),
        ("zk://127.0.0.1:99999/root", "between 1 and 65535"),
        ("zk://127.0.0.1:2181/a/../b", "'.', '..' or '@'"),
        ("zk://127.0.0.1:2181/@leases", "'.', '..' or '@'"),
        ("http://127.0.0.1:2181/root", "zk://host:port"),
    ],
)
def test_zk_url_errors_name_the_problem(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match="checkpoint_store") as info:
        ZkUrl.parse(url)
    assert message in str(info.value)


def test_zk_url_with_credentials_is_refused_and_masked() -> None:
    with pytest.raises(ConfigError, match="zk_auth") as info:
        ZkUrl.parse("zk://user:hunter2@127.0.0.1:2181/root")
    assert "hunter2" not in str(info.value)


def test_zk_paths_layout() -> None:
    p = ZkPaths("/root", "billing")
    assert (
        p.checkpoint("orders", "shardId-000000000001")
        == "/root/billing/orders/shardId-000000000001"
    )
    assert p.lease("orders", "s") == "/root/billing/orders/@leases/s"
    assert p.lease_holder("orders", "s") == "/root/billing/orders/@leases/s/holder"
    assert p.worker("orders", "w1") == "/root/billing/orders/@workers/w1"
    # Two jobs on one stream never share a node.
    assert ZkPaths("/root", "a").checkpoint("orders", "s") != p.checkpoint("orders", "s")


def test_secret_filter_masks_registered_secrets() -> None:
    f = _SecretFilter()
    f.add("hunter2")
    record = logging.LogRecord(
        "x", logging.DEBUG, "f", 1, "Auth(%s)", ("digest user:hunter2",), None
    )
    assert f.filter(record)
    assert record.getMessage() == "Auth(digest user:***)"
    f.discard("hunter2")
    record = logging.LogRecord("x", logging.DEBUG, "f", 1, "pw %s", ("hunter2",), None)
    f.filter(record)
    assert record.getMessage() == "pw hunter2"
