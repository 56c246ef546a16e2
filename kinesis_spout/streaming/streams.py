"""The streams the streaming source reads, as its offset process calls them (no PySpark).

Per stream, by name: its Kinesis calls (by ARN when given as one), its shard listing
(a ListShards answer reused for ``shard_list_interval``), its batch-end records (under
the stream's name, as :func:`~kinesis_spout.checkpoint.factory.open_batch_ends` keys
them) and, with ``consumer=efo``, the consumer its tasks subscribe as. Opened lazily,
once per process; the planner keys everything else by (stream, shard).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime

from kinesis_spout.checkpoint.batch_ends import BatchEndStore
from kinesis_spout.kinesis.api import KinesisApi
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.kinesis.efo_read import EfoTarget
from kinesis_spout.records import ShardInfo
from kinesis_spout.streaming.options import SourceOptions


class SourceStreams:
    """The source's streams by name: their Kinesis calls, listings, batch-end records
    and EFO consumers (see the module docstring)."""

    def __init__(
        self, options: SourceOptions, apis: Mapping[str, KinesisApi] | None = None
    ) -> None:
        self.options = options
        self.names = [s.name for s in options.streams]
        """The streams' names, in the order the options give them."""
        self._arns = {s.name: s.arn for s in options.streams}
        self._apis = dict(apis or {})
        self._stores: dict[str, BatchEndStore] = {}
        self._listed: dict[str, tuple[float, list[ShardInfo]]] = {}
        self._efo: dict[str, EfoTarget] = {}

    def arn(self, stream: str) -> str | None:
        """The stream's ARN when it was given as one (its calls then name it by ARN)."""
        return self._arns[stream]

    def api(self, stream: str) -> KinesisApi:
        api = self._apis.get(stream)
        if api is None:
            opts = self.options
            client = make_client(opts.endpoint_url, opts.region)
            api = self._apis[stream] = KinesisApi(client, stream, self._arns[stream])
        return api

    def store(self, stream: str) -> BatchEndStore:
        """The stream's batch-end records."""
        store = self._stores.get(stream)
        if store is None:
            from kinesis_spout.checkpoint.factory import open_batch_ends

            opts = self.options
            assert opts.checkpoint_store is not None
            store = self._stores[stream] = open_batch_ends(
                opts.checkpoint_store, opts.job_name, stream, opts.zk_auth, region=opts.region
            )
        return store

    def check(self) -> None:
        """Check that every stream exists (an unknown one: an error naming it)."""
        for name in self.names:
            self.api(name).check_stream()

    def server_time(self) -> datetime | None:
        """The earliest server time the streams' last answers gave (None: none did)."""
        known = [t for name in self.names if (t := self.api(name).server_time)]
        return min(known, default=None)

    def shards(self, stream: str) -> list[ShardInfo]:
        """The stream's shards, as the last ListShards answer within
        ``shard_list_interval`` gave them."""
        now = time.monotonic()
        at, listed = self._listed.get(stream, (float("-inf"), []))
        if now - at >= self.options.shard_list_interval:
            listed = self.api(stream).list_shards()
            self._listed[stream] = (now, listed)
        return listed

    def closed(self, stream: str) -> frozenset[str]:
        """The shards the last ListShards answer gave an ending sequence number."""
        _, listed = self._listed.get(stream, (0.0, []))
        return frozenset(s.shard_id for s in listed if s.is_closed)

    def efo_target(self, stream: str) -> EfoTarget | None:
        """``consumer=efo``: where the stream's tasks subscribe (the consumer registered
        if absent and ACTIVE, once per process); None for polling."""
        opts = self.options
        if opts.consumer != "efo":
            return None
        target = self._efo.get(stream)
        if target is None:
            from kinesis_spout.kinesis.consumer import ensure_consumer
            from kinesis_spout.kinesis.efo_api import FanOutApi

            consumer = ensure_consumer(FanOutApi(self.api(stream)), opts.consumer_name)
            target = EfoTarget(stream, opts.region, opts.endpoint_url, consumer.arn)
            self._efo[stream] = target
        return target

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()
