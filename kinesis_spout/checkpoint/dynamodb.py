"""The DynamoDB checkpoint store (``dynamodb://TABLE``): what an AWS stack already has.

One table holds the checkpoints, the job lease, the stream identities and the
batch-end records of every job that names it (item layout: :mod:`.dynamodb_layout`;
the table, its client and its errors: :mod:`.dynamodb_table`). Region, profile and
assumed role are the config's; the endpoint is boto3's (``AWS_ENDPOINT_URL_DYNAMODB``).

A save is compare-and-set on the item's ``version`` and never moves a checkpoint
backwards (:mod:`.dynamodb_round`: a round of shards in one go, one write per shard
that moved). While this process holds the job's lease (:mod:`.dynamodb_lease`),
every write is fenced by it: a holder cut off past its expiry, or taken over, is
refused with :class:`~kinesis_spout.errors.StaleCheckpointError`. Throttling backs
off and then reports :class:`~kinesis_spout.errors.CheckpointStoreUnavailableError`,
so the reader keeps the position and saves it at the next round.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kinesis_spout.checkpoint.dynamodb_identity import claim_identity
from kinesis_spout.checkpoint.dynamodb_items import CheckpointItems
from kinesis_spout.checkpoint.dynamodb_layout import DynamoUrl, JobKeys, check_name
from kinesis_spout.checkpoint.dynamodb_lease import held_lease
from kinesis_spout.checkpoint.dynamodb_round import Build, Round, VersionCache
from kinesis_spout.checkpoint.dynamodb_table import (
    ConditionFailed,
    DynamoTable,
    TableMissingError,
    dynamodb_client,
)
from kinesis_spout.checkpoint.resets import ResetFence, reset_value
from kinesis_spout.errors import CheckpointError
from kinesis_spout.records import Checkpoint

if TYPE_CHECKING:
    from kinesis_spout.aws import AssumedRole

log = logging.getLogger(__name__)

ROUND_CALLS = 16
"""Calls of a round in flight together."""


def _now() -> datetime:
    return datetime.now(UTC)


class DynamoDbCheckpointStore:
    """Checkpoints of one job in a DynamoDB table; see the module docstring.

    Build it with :meth:`from_url`. ``create_table=False`` (``status``) never creates
    the table: a missing one raises
    :class:`~kinesis_spout.checkpoint.dynamodb_table.TableMissingError`.
    """

    def __init__(
        self,
        table: DynamoTable,
        job_name: str,
        *,
        owner: str = "",
        create_table: bool = True,
        now: Callable[[], datetime] = _now,
    ) -> None:
        self.job_name = job_name
        self.owner = owner
        self.table = table
        self.keys = JobKeys(job_name)
        self.items = CheckpointItems(table, self.keys)
        self._now = now
        self._cache = VersionCache()
        self._resets = ResetFence()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._closed = False
        if not table.ensure(create=create_table):
            raise TableMissingError(f"DynamoDB table {table.name!r} does not exist")

    @classmethod
    def from_url(
        cls,
        url: str,
        job_name: str,
        *,
        owner: str = "",
        region: str | None = None,
        profile: str | None = None,
        role: AssumedRole | None = None,
        create_table: bool = True,
    ) -> DynamoDbCheckpointStore:
        """The store of ``dynamodb://TABLE`` in ``region`` with ``profile`` (None: as boto3
        resolves them), assuming ``role`` when given."""
        client = dynamodb_client(region, profile, role)
        table = DynamoTable(DynamoUrl.parse(url).table, client)
        return cls(table, job_name, owner=owner, create_table=create_table)

    def __repr__(self) -> str:
        return f"DynamoDbCheckpointStore(table={self.table.name!r}, job={self.job_name!r})"

    # -- the protocol --------------------------------------------------------------------
    def load(self, stream_name: str) -> dict[str, Checkpoint]:
        self._check_open()
        found = self.items.query(stream_name)
        out: dict[str, Checkpoint] = {}
        for shard, stored in found.items():
            self._cache.put((stream_name, shard), stored)
            assert stored.checkpoint is not None
            out[shard] = stored.checkpoint
        self._resets.loaded(stream_name, out)
        return out

    def save(self, checkpoint: Checkpoint) -> Checkpoint:
        out = self.save_many([checkpoint])[0]
        if isinstance(out, CheckpointError):
            raise out
        return out

    def save_many(self, checkpoints: Sequence[Checkpoint]) -> list[Checkpoint | CheckpointError]:
        """A round (:mod:`.dynamodb_round`): one write per shard that moved, in flight
        together; each outcome in its place."""
        stamped = [self._stamped(cp) for cp in checkpoints]  # every name checked first
        return self._round([((cp.stream_name, cp.shard_id), _as_is(cp)) for cp in stamped])

    def mark_ended(self, stream_name: str, shard_id: str, owner: str) -> Checkpoint:
        """Set ``shard_end`` keeping the stored position (compare-and-set, as ``save``)."""
        self._check_open()
        check_name("stream_name", stream_name)
        check_name("shard_id", shard_id)

        def ended(stored: Checkpoint | None) -> Checkpoint:
            return Checkpoint(
                stream_name,
                shard_id,
                stored.sequence_number if stored else None,
                stored.sub_sequence_number if stored else 0,
                shard_end=True,
                job_name=self.job_name,
                owner=owner or self.owner,
                updated_at=self._now(),
            )

        out = self._round([((stream_name, shard_id), ended)])[0]
        if isinstance(out, CheckpointError):
            raise out
        return out

    def reset(self, stream_name: str, shard_id: str, checkpoint: Checkpoint) -> Checkpoint:
        """See :meth:`CheckpointStore.reset`: over what is stored now, whatever it is."""
        self._check_open()
        lease = held_lease(self.table, self.job_name)
        for _ in range(20):
            stored = self.items.read(stream_name, shard_id)
            cp = reset_value(stored.checkpoint, checkpoint, self.job_name, self.owner, self._now())
            cp = replace(cp, stream_name=stream_name, shard_id=shard_id)
            got = self.items.put_many([(cp, stored)], lease, None)[0]
            if isinstance(got, ConditionFailed):
                continue
            if isinstance(got, CheckpointError):
                raise got
            self._cache.put((stream_name, shard_id), got)
            log.info("checkpoint %s/%s reset (reset %d)", stream_name, shard_id, cp.resets)
            return cp
        raise CheckpointError(f"reset of {stream_name}/{shard_id}: lost 20 times to other writers")

    def claim_stream(self, stream_name: str, identity: str) -> str | None:
        """See :meth:`CheckpointStore.claim_stream` (:mod:`.dynamodb_identity`)."""
        self._check_open()
        old = claim_identity(self.items, stream_name, identity)
        if old is not None:
            self._cache.forget(stream_name)
        return old

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # -- internals -----------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointError(f"{self!r} is closed")

    def _stamped(self, checkpoint: Checkpoint) -> Checkpoint:
        check_name("stream_name", checkpoint.stream_name)
        check_name("shard_id", checkpoint.shard_id)
        return replace(
            checkpoint,
            job_name=self.job_name,
            owner=checkpoint.owner or self.owner,
            updated_at=self._now(),
        )

    def _round(
        self, todo: list[tuple[tuple[str, str], Build]]
    ) -> list[Checkpoint | CheckpointError]:
        self._check_open()
        if not todo:
            return []
        pool = self._pool
        if len(todo) > 1 and pool is None:
            with self._pool_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(ROUND_CALLS, thread_name_prefix="dynamodb")
                pool = self._pool
        lease = held_lease(self.table, self.job_name)
        return Round(self.items, self._cache, self._resets, lease, pool, todo).run()


def _as_is(cp: Checkpoint) -> Build:
    """A save's build: ``cp`` whatever is stored."""
    return lambda stored: cp
