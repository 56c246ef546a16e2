"""Reading Kinesis for ``status``: the stream, its shards, and one lag probe per shard.

Cost: DescribeStreamSummary and ListShards (one call per page of 1,000 shards),
then per shard that is neither ended nor unlisted, one GetShardIterator at the
shard's checkpoint and one GetRecords with ``Limit=1`` (the probe). A probe reads
at most one record and takes one of the shard's five GetRecords calls of that
second from the job. ``--no-lag`` skips the probes. Probes run on a few threads.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kinesis_spout.config import InitialPosition, SpoutConfig
from kinesis_spout.core.startup import describe_stream
from kinesis_spout.errors import KinesisError
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.records import ShardInfo
from kinesis_spout.status.model import LagProbe, ProbeStart
from tracker import ExponentialBackoff

#: Threads probing shards at once.
PROBE_THREADS = 8


@dataclass(frozen=True, slots=True)
class StreamView:
    """The stream as Kinesis describes it."""

    status: str
    shards: tuple[ShardInfo, ...]


def read_stream(client: Any, config: SpoutConfig) -> tuple[StreamView, int]:
    """``(view, calls made)``; an unknown stream or an unreachable endpoint raises an
    error naming the stream, the endpoint and the region."""
    api = KinesisApi(client, config.stream_name)
    endpoint = getattr(getattr(client, "meta", None), "endpoint_url", config.endpoint_url)
    status, shards = describe_stream(
        api, config, endpoint, backoff=ExponentialBackoff(0.2, cap=2.0), sleep=time.sleep
    )
    return StreamView(status, tuple(shards)), api.calls


def probe(api: KinesisApi, shard_id: str, start: ProbeStart) -> LagProbe:
    """Open an iterator at ``start`` and read at most one record."""
    try:
        if start.iterator_type == "AFTER_SEQUENCE_NUMBER":
            iterator = api.shard_iterator(shard_id, after_sequence=start.sequence)
        elif start.iterator_type == "AT_TIMESTAMP":
            iterator = api.shard_iterator(
                shard_id, position=InitialPosition.AT_TIMESTAMP, timestamp=start.timestamp
            )
        else:
            iterator = api.shard_iterator(shard_id, position=InitialPosition.TRIM_HORIZON)
        page = api.get_records(shard_id, iterator, 1)
    except KinesisError as exc:
        return LagProbe(pending=None, error=str(exc))
    behind = page.millis_behind_latest
    return LagProbe(
        # An empty page that is still behind the tip: records further on (real Kinesis
        # may need several calls to reach them in a sparse shard).
        pending=page.raw_count > 0 or bool(behind),
        millis_behind_latest=behind,
        next_arrival=page.records[0].approximate_arrival if page.records else None,
    )


def probe_lags(
    client: Any, stream: str, starts: Mapping[str, ProbeStart]
) -> tuple[dict[str, LagProbe], int]:
    """``({shard: probe}, calls made)`` for every shard in ``starts``."""
    if not starts:
        return {}, 0
    apis = {shard: KinesisApi(client, stream) for shard in starts}
    with ThreadPoolExecutor(max_workers=min(PROBE_THREADS, len(starts))) as pool:
        futures = {s: pool.submit(probe, apis[s], s, start) for s, start in starts.items()}
        lags = {s: f.result() for s, f in futures.items()}
    return lags, sum(a.calls for a in apis.values())
