"""The batch-end stores' contract, on every backend (a file directory, a real ZooKeeper,
DynamoDB on moto's server): first writer wins per (run, batch, shard), runs are kept
apart, and a leftover attempt of a batch whose records were removed records nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from kinesis_spout.checkpoint.batch_ends import BatchEnd, BatchEndError, BatchEndStore
from kinesis_spout.checkpoint.factory import open_batch_ends
from kinesis_spout.records import ShardPosition

pytestmark = pytest.mark.integration

A = "shardId-000000000000"


@pytest.fixture(params=["file", "zk", "dynamodb"])
def store(
    request: pytest.FixtureRequest, store_url_of: Callable[[str], str]
) -> Iterator[BatchEndStore]:
    made = open_batch_ends(store_url_of(str(request.param)), "job", "orders")
    yield made
    made.close()


def end(seq: int) -> BatchEnd:
    return BatchEnd(ShardPosition(str(seq), 0, count=1), at=1.0)


def test_first_writer_wins_within_a_run_and_runs_are_apart(store: BatchEndStore) -> None:
    assert store.record("r1", 1, A, end(10)) == end(10)
    assert store.record("r1", 1, A, end(20)) == end(10)
    assert store.get("r2", 1, A) is None and store.get("", 1, A) is None
    assert store.record("r2", 1, A, end(30)) == end(30)
    assert store.record("", 1, A, end(40)) == end(40)  # offsets of an earlier release
    assert [store.get(r, 1, A) for r in ("r1", "r2", "")] == [end(10), end(30), end(40)]
    assert "/run-r1/" in store.where("r1", 1, A) and "/run-" not in store.where("", 1, A)


def test_a_leftover_attempt_of_a_removed_batch_records_nothing(store: BatchEndStore) -> None:
    for b in (1, 2, 3):
        store.record("r1", b, A, end(b))
    store.record("r2", 1, A, end(9))
    assert store.forget_before("r1", 3) == 2
    assert store.floor("r1") == 3 and store.floor("r2") == 0
    with pytest.raises(BatchEndError, match=r"batch 2 was committed .*batches >= 3"):
        store.record("r1", 2, A, end(2))
    assert store.get("r1", 2, A) is None  # not re-created
    assert store.get("r1", 3, A) == end(3) and store.get("r2", 1, A) == end(9)
    assert store.forget_before("", 5) == 0  # the legacy layout never touches runs
    assert store.get("r1", 3, A) == end(3) and store.floor("r1") == 3
