"""The batch-end records of a ``dynamodb://`` checkpoint store (:mod:`.batch_ends`).

Items of the store's table (:mod:`.dynamodb_layout`)::

    pk = <job>/<stream>/@batches/run-<run>   sk = <batch, 12 digits>/<shard>   end = <JSON>
    pk = <job>/<stream>/@batches/run-<run>   sk = @floor                       floor = N

A record is a PutItem on the condition that no item has its key, so the first writer
wins; the one that loses reads the winner's (returned with the failed condition). The
floor only rises (an UpdateItem on the condition that it is lower); the records below
it are found with one Query (their sort keys sort by batch) and deleted.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from kinesis_spout.checkpoint.batch_ends import (
    BatchEnd,
    BatchEndError,
    decode_end,
    encode_end,
    removed_error,
)
from kinesis_spout.checkpoint.dynamodb_layout import (
    FLOOR_SK,
    DynamoUrl,
    JobKeys,
    batch_sk,
    item_where,
)
from kinesis_spout.checkpoint.dynamodb_table import (
    ConditionFailed,
    DynamoTable,
    dynamodb_client,
    get_n,
    get_s,
    n,
    s,
)

if TYPE_CHECKING:
    from kinesis_spout.aws import AssumedRole


class DynamoDbBatchEnds:
    """``dynamodb://TABLE``: one item per record, put only if absent (first writer wins);
    the table reached in ``region`` with ``profile``, assuming ``role`` when given."""

    def __init__(
        self,
        url: str,
        job: str,
        stream: str,
        *,
        region: str | None = None,
        profile: str | None = None,
        role: AssumedRole | None = None,
    ) -> None:
        parsed = DynamoUrl.parse(url)
        self.table = DynamoTable(parsed.table, dynamodb_client(region, profile, role))
        self.keys = JobKeys(job)
        self.stream = stream
        self.keys.stream(stream)  # checks the name
        self._ready = False

    def _pk(self, run: str) -> str:
        return self.keys.batches(self.stream, run)

    def _key(self, run: str, sk: str) -> dict[str, Any]:
        return {"pk": s(self._pk(run)), "sk": s(sk)}

    def where(self, run: str, batch: int, shard: str) -> str:
        return item_where(self.table.name, {"pk": self._pk(run), "sk": batch_sk(batch, shard)})

    def get(self, run: str, batch: int, shard: str) -> BatchEnd | None:
        self._ensure()
        key = self._key(run, batch_sk(batch, shard))
        item = self.table.call("GetItem", Key=key, ConsistentRead=True).get("Item")
        return None if item is None else self._decode(item, run, batch, shard)

    def record(self, run: str, batch: int, shard: str, end: BatchEnd) -> BatchEnd:
        self._ensure()
        key = self._key(run, batch_sk(batch, shard))
        recorded = end
        try:
            self.table.call(
                "PutItem",
                Item={**key, "end": s(encode_end(end).decode("utf-8"))},
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ConditionFailed as exc:  # recorded first by another attempt: that one
            found = exc.item if exc.item is not None else self._get_item(key)
            assert found is not None
            recorded = self._decode(found, run, batch, shard)
        floor = self.floor(run)  # after the put: a cleanup that raced us is seen here
        if batch < floor:
            self._remove(run, batch, batch + 1)
            raise removed_error(self.where(run, batch, shard), batch, floor)
        return recorded

    def floor(self, run: str) -> int:
        self._ensure()
        item = self._get_item(self._key(run, FLOOR_SK))
        if item is None:
            return 0
        value = get_n(item, "floor")
        if value is None or value != int(value) or value < 0:
            where = item_where(self.table.name, {"pk": self._pk(run), "sk": FLOOR_SK})
            raise BatchEndError(f"corrupt batch-end floor at {where}: {item!r:.100}")
        return int(value)

    def forget_before(self, run: str, batch: int) -> int:
        self._ensure()
        # The floor first (a leftover attempt then sees it); one as high already stays.
        with contextlib.suppress(ConditionFailed):
            self.table.call(
                "UpdateItem",
                Key=self._key(run, FLOOR_SK),
                UpdateExpression="SET #f = :b",
                ConditionExpression="attribute_not_exists(#f) OR #f < :b",
                ExpressionAttributeNames={"#f": "floor"},
                ExpressionAttributeValues={":b": n(batch)},
            )
        return self._remove(run, 0, batch)

    def close(self) -> None:
        return None

    # -- calls -------------------------------------------------------------------------
    def _ensure(self) -> None:
        if not self._ready:
            self.table.ensure()
            self._ready = True

    def _get_item(self, key: dict[str, Any]) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self.table.call("GetItem", Key=key, ConsistentRead=True).get(
            "Item"
        )
        return item

    def _decode(self, item: dict[str, Any], run: str, batch: int, shard: str) -> BatchEnd:
        where = self.where(run, batch, shard)
        data = get_s(item, "end")
        if data is None:
            raise BatchEndError(f"corrupt batch-end record at {where}: no 'end': {item!r:.200}")
        return decode_end(data.encode("utf-8"), where)

    def _remove(self, run: str, first: int, stop: int) -> int:
        """Delete the records of batches ``first`` to ``stop - 1``; how many batches had some."""
        if stop <= first:
            return 0
        params: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {
                ":pk": s(self._pk(run)),
                ":lo": s(f"{first:012d}/"),
                ":hi": s(f"{stop - 1:012d}/\uffff"),
            },
            "ProjectionExpression": "pk, sk",
            "ConsistentRead": True,
        }
        batches: set[str] = set()
        while True:
            page = self.table.call("Query", **params)
            for item in page.get("Items", []):
                batches.add(str(item["sk"]["S"]).split("/", 1)[0])
                self.table.call("DeleteItem", Key={"pk": item["pk"], "sk": item["sk"]})
            if "LastEvaluatedKey" not in page:
                return len(batches)
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]
