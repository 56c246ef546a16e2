"""Where the emulators differ from real Kinesis in ways that matter to this
project. Each test states what real Kinesis does and asserts what each emulator
does, so a change in an emulator shows up here; ``localstack/README.md`` lists
the same table with these test names.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from kinesis_spout.errors import ExpiredIteratorError, ThrottledError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.testing.servers import KinesisEmulator
from kinesis_spout.testing.streams import create_stream, emulator_client, wait_active

pytestmark = pytest.mark.integration

KINESIS_MOCK_LIKE = ("kinesis-mock", "localstack")  # LocalStack's engine is kinesis-mock

# kinesis-mock's shard iterators: 8 bytes of header, then AES-256-CBC (PKCS#7) of
# "<14-digit epoch millis>/<stream>/<shard>/<sequence>/<37 zeros>" under a fixed,
# published key and IV (an emulator detail, not a secret). Re-encrypting one with
# an older time makes an iterator that is, for the emulator, 301 seconds old.
_ITER_KEY = bytes.fromhex("1133a5a833666b49abf28c8ba302930f0b2fb240dccd43cf4dfbc0ca91f17751")
_ITER_IV = bytes.fromhex("7bf139dbabbea2d9995d6fcae1dff7da")


def _age_kinesis_mock_iterator(iterator: str, seconds: float) -> str:
    raw = base64.b64decode(iterator)
    header, body = raw[:8], raw[8:]
    decryptor = Cipher(algorithms.AES(_ITER_KEY), modes.CBC(_ITER_IV)).decryptor()
    unpadder = padding.PKCS7(128).unpadder()
    plain = unpadder.update(decryptor.update(body) + decryptor.finalize()) + unpadder.finalize()
    millis, rest = plain.decode("utf-8").split("/", 1)
    older = f"{int(millis) - int(seconds * 1000):014d}/{rest}".encode()
    padder = padding.PKCS7(128).padder()
    padded = padder.update(older) + padder.finalize()
    encryptor = Cipher(algorithms.AES(_ITER_KEY), modes.CBC(_ITER_IV)).encryptor()
    return base64.b64encode(header + encryptor.update(padded) + encryptor.finalize()).decode()


def _split_single_shard_stream(c: Any, name: str) -> str:
    """A 1-shard stream with 5 records, then split in two; returns the parent id."""
    create_stream(c, name, shards=1)
    c.put_records(
        StreamName=name, Records=[{"PartitionKey": str(i), "Data": b"before"} for i in range(5)]
    )
    (shard,) = c.list_shards(StreamName=name)["Shards"]
    lo, hi = (int(shard["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    c.split_shard(
        StreamName=name, ShardToSplit=shard["ShardId"], NewStartingHashKey=str((lo + hi) // 2)
    )
    deadline = time.monotonic() + 30
    while len(c.list_shards(StreamName=name)["Shards"]) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    wait_active(c, name)
    return str(shard["ShardId"])


def test_split_parent_shard_ends(any_emulator: KinesisEmulator, unique_name: str) -> None:
    """Real Kinesis: after a split the parent takes no more writes, reading it
    ends with no NextShardIterator and the ChildShards, and ListShards gives its
    last sequence number as EndingSequenceNumber."""
    client = emulator_client(any_emulator.endpoint_url)
    parent = _split_single_shard_stream(client, unique_name)
    after = client.put_records(
        StreamName=unique_name,
        Records=[{"PartitionKey": f"k{i}", "Data": b"after"} for i in range(10)],
    )
    landed_in = {r["ShardId"] for r in after["Records"]}
    api = KinesisApi(client, unique_name)
    info = {s.shard_id: s for s in api.list_shards()}
    pages = []
    iterator: str | None = api.shard_iterator(parent)
    for _ in range(5):
        assert iterator is not None
        page = api.get_records(parent, iterator, 1000)
        pages.append(page)
        iterator = page.next_iterator
        if iterator is None:
            break
    parent_records = sum(len(p.records) for p in pages)

    if any_emulator.kind in KINESIS_MOCK_LIKE:
        assert parent not in landed_in
        assert parent_records == 5
        assert iterator is None and {c.shard_id for c in pages[-1].child_shards} == set(info) - {
            parent
        }
        # not the last real sequence number, unlike Kinesis
        assert info[parent].ending_sequence_number == "9223372036854775807"
    else:  # moto: the parent never ends and keeps taking writes
        assert any_emulator.kind == "moto"
        assert landed_in == {parent}
        assert parent_records == 15
        assert iterator is not None and all(not p.child_shards for p in pages)
        # ...although ListShards says it is closed
        assert info[parent].ending_sequence_number is not None


def test_iterator_expiry(any_emulator: KinesisEmulator, unique_name: str) -> None:
    """Real Kinesis: an iterator expires 5 minutes after it was handed out
    (ExpiredIteratorException)."""
    client = emulator_client(any_emulator.endpoint_url)
    create_stream(client, unique_name, shards=1)
    client.put_record(StreamName=unique_name, PartitionKey="k", Data=b"x")
    api = KinesisApi(client, unique_name)
    shard = api.list_shards()[0].shard_id
    iterator = api.shard_iterator(shard)
    if any_emulator.kind in KINESIS_MOCK_LIKE:
        old = _age_kinesis_mock_iterator(iterator, 301)
        with pytest.raises(ExpiredIteratorError, match="expired"):
            api.get_records(shard, old, 10)
        almost = _age_kinesis_mock_iterator(iterator, 290)
        assert len(api.get_records(shard, almost, 10).records) == 1
    else:  # moto: the iterator holds no time at all, so it can never expire
        assert any_emulator.kind == "moto"
        assert base64.b64decode(iterator).decode() == f"{unique_name}:{shard}:0"


def test_get_records_is_never_throttled(any_emulator: KinesisEmulator, unique_name: str) -> None:
    """Real Kinesis: 5 GetRecords calls per second per shard, then
    ProvisionedThroughputExceededException. No emulator enforces it, so the
    reader's rate limit and throttle backoff can only be tested through a
    fault-injecting proxy (devkit.faultproxy)."""
    client = emulator_client(any_emulator.endpoint_url)
    create_stream(client, unique_name, shards=1)
    api = KinesisApi(client, unique_name)
    shard = api.list_shards()[0].shard_id
    iterator = api.shard_iterator(shard)
    started = time.monotonic()
    calls = 0
    try:
        while calls < 15:
            api.get_records(shard, iterator, 10)
            calls += 1
    except ThrottledError:  # pragma: no cover - the difference this test watches for
        pytest.fail(f"{any_emulator.kind} throttled GetRecords after {calls} calls")
    assert calls == 15
    if time.monotonic() - started < 1.0:  # only meaningful when faster than 5/s
        assert calls > 5


def test_sequence_numbers(any_emulator: KinesisEmulator, unique_name: str) -> None:
    """Real Kinesis: sequence numbers are decimal strings of up to 128 bits
    (56 digits today), increasing per shard. moto's are small integers; code
    that compares them as strings, not integers, passes on moto by luck."""
    client = emulator_client(any_emulator.endpoint_url)
    create_stream(client, unique_name, shards=1)
    seqs = [
        client.put_record(StreamName=unique_name, PartitionKey="k", Data=b"x")["SequenceNumber"]
        for _ in range(12)
    ]
    assert [int(s) for s in seqs] == sorted(int(s) for s in seqs)
    if any_emulator.kind in KINESIS_MOCK_LIKE:
        assert all(len(s) == 56 for s in seqs)
    else:
        assert any_emulator.kind == "moto"
        assert seqs[-1] == "12" and sorted(seqs) != sorted(seqs, key=int)
