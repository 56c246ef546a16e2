"""The checkpoint items of one job in a DynamoDB table: read them, write them on a condition.

An item is ``{pk: "<job>/<stream>", sk: "<shardId>", checkpoint, version}``. Every write
is conditional on the version and the checkpoint read, and asks for the item found when
the condition fails, so a lost race costs no extra read. A round
(:meth:`CheckpointItems.put_many`) goes out as TransactWriteItems of up to 99 checkpoints
and a check of the lease item when this process holds the job's lease, else as one
conditional PutItem per checkpoint, all in flight; never as BatchWriteItem, which takes no
condition. Why, and what each costs: docs/checkpoints.md ("Compare-and-set, and a round").
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from kinesis_spout.checkpoint.codec import checkpoint_to_json, decode_checkpoint
from kinesis_spout.checkpoint.dynamodb_layout import JobKeys, item_where
from kinesis_spout.checkpoint.dynamodb_lease import DynamoDbJobLease
from kinesis_spout.checkpoint.dynamodb_table import (
    ConditionFailed,
    DynamoTable,
    TransactionCancelled,
    get_n,
    get_s,
    n,
    s,
)
from kinesis_spout.errors import (
    CheckpointError,
    CheckpointStoreUnavailableError,
    CorruptCheckpointError,
    StaleCheckpointError,
)
from kinesis_spout.records import Checkpoint

TRANSACTION_SIZE = 99
"""Checkpoints per fenced transaction (DynamoDB's limit is 100 actions, one is the lease)."""


@dataclass(frozen=True, slots=True)
class Stored:
    """A shard's item as read: its checkpoint (None: no item), version (0: no item) and
    checkpoint as stored (the JSON string)."""

    checkpoint: Checkpoint | None
    version: int
    data: str = ""


class Again(CheckpointError):
    """Not written: another action of its transaction was refused; send it again."""


Outcome = Stored | ConditionFailed | Again | CheckpointError
"""What one write came to: :class:`Stored` (written: its new version), the condition
failed (``item``: what is stored), or an error."""


class CheckpointItems:
    """The checkpoint items of ``job`` in ``table``; see the module docstring."""

    def __init__(self, table: DynamoTable, keys: JobKeys) -> None:
        self.table = table
        self.keys = keys

    def key(self, stream: str, shard: str) -> dict[str, Any]:
        return {k: s(v) for k, v in self.keys.checkpoint(stream, shard).items()}

    def where(self, stream: str, shard: str) -> str:
        return item_where(self.table.name, self.keys.checkpoint(stream, shard))

    # -- reading --------------------------------------------------------------------------
    def decode(self, item: dict[str, Any] | None, stream: str, shard: str) -> Stored:
        """An item as read (a corrupt one: :class:`CorruptCheckpointError` naming it)."""
        if not item:
            return Stored(None, 0)
        where = self.where(stream, shard)
        data, version = get_s(item, "checkpoint"), get_n(item, "version")
        if data is None or version is None or version != int(version) or version < 1:
            raise CorruptCheckpointError(
                f"checkpoint at {where} lacks a 'checkpoint' string or a 'version' number "
                f">= 1: {json.dumps(item)[:200]}"
            )
        cp = decode_checkpoint(data, where=where, stream=stream, shard=shard, job=self.keys.job)
        return Stored(cp, int(version), data)

    def read(self, stream: str, shard: str) -> Stored:
        """A shard's item now (a strongly consistent read)."""
        got = self.table.call("GetItem", Key=self.key(stream, shard), ConsistentRead=True)
        return self.decode(got.get("Item"), stream, shard)

    def query(self, stream: str) -> dict[str, Stored]:
        """Every checkpoint item of ``stream`` (strongly consistent), by shard."""
        out: dict[str, Stored] = {}
        for item in self.query_items(stream):
            shard = get_s(item, "sk") or ""
            out[shard] = self.decode(item, stream, shard)
        return out

    def query_items(self, stream: str) -> list[dict[str, Any]]:
        """The checkpoint items of ``stream`` as stored (strongly consistent)."""
        out: list[dict[str, Any]] = []
        params: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": s(self.keys.stream(stream))},
            "ConsistentRead": True,
        }
        while True:
            page = self.table.call("Query", **params)
            items = page.get("Items", [])
            out.extend(i for i in items if not (get_s(i, "sk") or "@").startswith("@"))
            if "LastEvaluatedKey" not in page:
                return out
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # -- writing --------------------------------------------------------------------------
    def put_item(self, cp: Checkpoint, old: Stored) -> tuple[dict[str, Any], Stored]:
        """The PutItem of ``cp`` over the item ``old`` (its item, its condition), and what
        is stored once it is written."""
        data = json.dumps(checkpoint_to_json(cp), sort_keys=True)
        item = {
            **self.key(cp.stream_name, cp.shard_id),
            "checkpoint": s(data),
            "version": n(old.version + 1),
        }
        put: dict[str, Any] = {"Item": item, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
        if old.version:
            put["ConditionExpression"] = "version = :v AND checkpoint = :c"
            put["ExpressionAttributeValues"] = {":v": n(old.version), ":c": s(old.data)}
        else:
            put["ConditionExpression"] = "attribute_not_exists(pk)"
        return put, Stored(cp, old.version + 1, data)

    def put_many(
        self,
        writes: Sequence[tuple[Checkpoint, Stored]],
        lease: DynamoDbJobLease | None,
        pool: Executor | None,
    ) -> list[Outcome]:
        """Write each ``(checkpoint, the item it replaces)``, fenced by ``lease`` if given;
        one outcome each, in order (see the module docstring). ``pool``: where calls go
        out together (None: one after the other)."""
        if lease is None:
            return together(pool, [functools.partial(self._put, cp, old) for cp, old in writes])
        size = TRANSACTION_SIZE
        chunks = [writes[i : i + size] for i in range(0, len(writes), size)]
        done = together(pool, [functools.partial(self._transact, c, lease) for c in chunks])
        out: list[Outcome] = []
        for chunk, got in zip(chunks, done, strict=True):
            out.extend(got if isinstance(got, list) else [got] * len(chunk))
        return out

    def _put(self, cp: Checkpoint, old: Stored) -> Outcome:
        put, new = self.put_item(cp, old)
        try:
            self.table.call("PutItem", **put)
        except ConditionFailed as exc:
            return exc
        except CheckpointStoreUnavailableError as exc:
            return exc
        return new

    def _transact(
        self, writes: Sequence[tuple[Checkpoint, Stored]], lease: DynamoDbJobLease
    ) -> list[Outcome] | CheckpointError:
        what = f"checkpoint write of {len(writes)} shard(s) of job {self.keys.job!r}"
        try:
            actions = [lease.fence(what)]
        except StaleCheckpointError as exc:
            return exc
        news: list[Outcome] = []
        for cp, old in writes:
            put, new = self.put_item(cp, old)
            actions.append({"Put": {"TableName": self.table.name, **put}})
            news.append(new)
        try:
            self.table.call("TransactWriteItems", TransactItems=actions)
        except TransactionCancelled as exc:
            reasons = exc.reasons
            if not reasons or reasons[0].get("Code") == "ConditionalCheckFailed":
                return lease.refused(what)
            return [_reason(exc, r) for r in reasons[1:]]
        except CheckpointStoreUnavailableError as exc:
            return exc
        return news


def _reason(exc: TransactionCancelled, reason: dict[str, Any]) -> Outcome:
    code = str(reason.get("Code"))
    if code == "ConditionalCheckFailed":
        return ConditionFailed(str(exc), reason.get("Item"))
    if code == "None":
        return Again(str(exc))
    return CheckpointError(f"{exc}: {code}: {reason.get('Message', '')}")


def together(pool: Executor | None, calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """Each call's result, in order; together in ``pool`` when there is more than one."""
    if pool is None or len(calls) < 2:
        return [call() for call in calls]
    return [f.result() for f in [pool.submit(call) for call in calls]]
