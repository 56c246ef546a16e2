"""Real iterator expiry: kinesis-mock's 300 s limit, reached by moving its clock."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from reader_helpers import ClockKinesisMock, drive, fill, ids, put, read_all, spout

from kinesis_spout.config import InitialPosition
from kinesis_spout.metrics import InMemoryMetrics
from kinesis_spout.records import Record
from kinesis_spout.testing.streams import emulator_client

pytestmark = pytest.mark.integration


def test_expired_iterator_reopens_after_the_last_record(
    clock_kinesis_mock: ClockKinesisMock, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(clock_kinesis_mock.endpoint_url)
    written = fill(client, unique_name, 600, shards=2)
    metrics = InMemoryMetrics()
    sp = spout(
        clock_kinesis_mock.endpoint_url,
        unique_name,
        tmp_path,
        metrics=metrics,
        records_per_call=100,
        max_in_flight=150,
    )
    got: list[Record] = []
    # Stop at the in-flight bound: the shards are not polled while it holds.
    drive(sp, got.extend, stop=lambda: sp.in_flight >= 300)
    clock_kinesis_mock.jump()  # every iterator handed out so far is now 301 s old

    def handle(batch: list[Record]) -> None:
        got.extend(batch)
        sp.ack_many(batch)

    sp.ack_many(got)
    drive(sp, handle)
    sp.close()
    assert metrics.count("iterators_expired") >= 2
    assert Counter(ids(got)) == Counter(written)


def test_latest_iterator_expiring_before_any_record_skips_nothing(
    clock_kinesis_mock: ClockKinesisMock, unique_name: str, tmp_path: Path
) -> None:
    client = emulator_client(clock_kinesis_mock.endpoint_url)
    fill(client, unique_name, 20, shards=1, prefix="old")
    # Put the old records well before "now" on the server's clock: the re-open
    # after an expiry may re-read up to a second or two before the start.
    clock_kinesis_mock.jump()
    metrics = InMemoryMetrics()
    sp = spout(
        clock_kinesis_mock.endpoint_url,
        unique_name,
        tmp_path,
        metrics=metrics,
        initial_position=InitialPosition.LATEST,
        empty_shard_backoff=0.5,
    )
    assert read_all(sp) == []  # LATEST pinned, nothing yet
    clock_kinesis_mock.jump()
    new = put(client, unique_name, 25, prefix="new")
    got = read_all(sp, stop=lambda: sp.stats().read >= 25 and sp.is_idle)
    sp.close()
    assert metrics.count("iterators_expired") == 1
    assert ids(got) == new
