"""botocore retries: off for the shard getters' client (their own non-blocking backoff),
botocore's standard mode for one-shot CLI calls (issue 26, hole 5)."""

from __future__ import annotations

from kinesis_spout.deadletter.s3 import s3_client
from kinesis_spout.kinesis.client import ONE_SHOT_RETRIES, make_client


def test_one_shot_clients_use_botocore_standard_retries() -> None:
    getter = make_client("http://127.0.0.1:1")
    assert getter.meta.config.retries == {"total_max_attempts": 1, "mode": "standard"}
    cli = make_client("http://127.0.0.1:1", one_shot=True)
    assert (
        cli.meta.config.retries
        == ONE_SHOT_RETRIES
        == {
            "mode": "standard",
            "total_max_attempts": 3,
        }
    )
    assert s3_client(one_shot=True).meta.config.retries["mode"] == "standard"
