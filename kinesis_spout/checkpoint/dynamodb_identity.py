"""A stream's identity in a DynamoDB store, and its old checkpoints moved aside.

The identity (the stream's creation time) is the ``identity`` of the item
``pk=<job>/<stream>, sk=@identity``. A claim of another identity is a stream deleted
and created again under its name: its checkpoints are copied to the partition
``<job>/<stream>/@retired/<old identity>`` (kept, never resumed), deleted from the
stream's, and only then is the new identity written, on the condition that the item
still has the version read. A claim cut short leaves the old identity and the copies
done: the next claim copies again what is left (the same values) and finishes. Of two
claims at once, the one whose condition fails finds the new identity written and
answers with the old one too: both callers load the stream again.
"""

from __future__ import annotations

from typing import Any

from kinesis_spout.checkpoint.dynamodb_items import CheckpointItems
from kinesis_spout.checkpoint.dynamodb_table import ConditionFailed, get_n, get_s, n, s
from kinesis_spout.errors import CheckpointStoreUnavailableError

ATTEMPTS = 20


def claim_identity(items: CheckpointItems, stream: str, identity: str) -> str | None:
    """See :meth:`~kinesis_spout.checkpoint.base.CheckpointStore.claim_stream`."""
    table, keys = items.table, items.keys
    key = {k: s(v) for k, v in keys.identity(stream).items()}
    first_seen: str | None = None
    for _ in range(ATTEMPTS):
        got = table.call("GetItem", Key=key, ConsistentRead=True).get("Item") or {}
        old, version = get_s(got, "identity"), int(get_n(got, "version") or 0)
        if old == identity:
            return first_seen
        first_seen = first_seen or old
        if old is not None:
            _retire(items, stream, old)
        condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(pk)"}
        if version:
            condition = {
                "ConditionExpression": "version = :v",
                "ExpressionAttributeValues": {":v": n(version)},
            }
        item = {**key, "identity": s(identity), "version": n(version + 1)}
        try:
            table.call("PutItem", Item=item, **condition)
        except ConditionFailed:
            continue  # another claim got there first: read again
        return old
    raise CheckpointStoreUnavailableError(
        f"claim {stream}: {ATTEMPTS} attempts lost to concurrent writers"
    )


def _retire(items: CheckpointItems, stream: str, old: str) -> None:
    """Copy every checkpoint item of ``stream`` to its retired partition, then delete it
    (on the condition that it is still the copied version)."""
    table = items.table
    aside = items.keys.retired(stream, old)
    for _ in range(ATTEMPTS):
        found = items.query_items(stream)
        if not found:
            return
        for raw in found:
            table.call("PutItem", Item={**raw, "pk": s(aside)})
            try:
                table.call(
                    "DeleteItem",
                    Key={"pk": raw["pk"], "sk": raw["sk"]},
                    ConditionExpression="version = :v",
                    ExpressionAttributeValues={":v": raw["version"]},
                )
            except ConditionFailed:
                continue  # written meanwhile: copied again on the next pass
    raise CheckpointStoreUnavailableError(
        f"moving the checkpoints of {stream} aside: {ATTEMPTS} passes lost to writers"
    )
