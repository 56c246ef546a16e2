"""The stored form of a checkpoint: one JSON object per shard (pure, no I/O).

Both real stores write the same object, so a checkpoint can be inspected with
``zkCli.sh get`` or ``jq`` and moved between stores::

    {"stream": "orders", "shard": "shardId-000000000003",
     "sequence": "49590338271490256608559692538361571095921575989136588898",
     "sub_sequence": 0, "shard_end": false, "job": "billing",
     "owner": "host-a-4242", "updated_at": "2026-01-31T12:00:00.123456+00:00"}

``stream``, ``shard`` and ``job`` are written so that a value read back can be
checked against where it was found: a node copied from another stream, or
written by another job, is :class:`CorruptCheckpointError`, never a silent
restart (storm-kafka's trap of two spouts sharing one path).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from kinesis_spout.errors import CorruptCheckpointError
from kinesis_spout.records import Checkpoint
from tracker import SequenceKey

_REQUIRED = ("stream", "shard", "sequence", "sub_sequence", "shard_end", "job")


def checkpoint_to_json(cp: Checkpoint) -> dict[str, Any]:
    """The JSON object stored for ``cp`` (sequence numbers stay decimal strings)."""
    return {
        "stream": cp.stream_name,
        "shard": cp.shard_id,
        "sequence": cp.sequence_number,
        "sub_sequence": cp.sub_sequence_number,
        "shard_end": cp.shard_end,
        "job": cp.job_name,
        "owner": cp.owner,
        "updated_at": cp.updated_at.isoformat() if cp.updated_at else None,
        **({"start_at": cp.start_at.isoformat()} if cp.start_at else {}),
        **({"resets": cp.resets} if cp.resets else {}),
    }


def encode_checkpoint(cp: Checkpoint) -> bytes:
    """UTF-8 JSON bytes of :func:`checkpoint_to_json`, keys sorted (stable output)."""
    return json.dumps(checkpoint_to_json(cp), sort_keys=True, separators=(",", ":")).encode()


def decode_checkpoint(
    data: bytes | str, *, where: str, stream: str, shard: str, job: str
) -> Checkpoint:
    """Parse stored bytes and check they belong to ``job``/``stream``/``shard``.

    ``where`` (a node path or file name) is named in every error. Raises
    :class:`CorruptCheckpointError` for bytes that are not a JSON object, a
    missing or mistyped field, a malformed sequence number, or a value that names
    another stream, shard or job.
    """
    try:
        # Decode as UTF-8 first: json.loads guesses UTF-16/32 from NUL bytes and
        # would name that codec in the error.
        obj = json.loads(data.decode("utf-8") if isinstance(data, bytes | bytearray) else data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptCheckpointError(
            f"checkpoint at {where} is not valid JSON ({exc}): {_preview(data)}"
        ) from None
    return checkpoint_from_json(obj, where=where, stream=stream, shard=shard, job=job)


def checkpoint_from_json(obj: Any, *, where: str, stream: str, shard: str, job: str) -> Checkpoint:
    """:func:`decode_checkpoint` for an already parsed JSON value."""
    if not isinstance(obj, dict):
        raise CorruptCheckpointError(
            f"checkpoint at {where} is not a JSON object: {_preview(json.dumps(obj))}"
        )
    missing = [k for k in _REQUIRED if k not in obj]
    if missing:
        raise CorruptCheckpointError(
            f"checkpoint at {where} lacks field(s) {', '.join(missing)}: {_preview(obj)}"
        )
    for name, expected in (("stream", stream), ("shard", shard), ("job", job)):
        if obj[name] != expected:
            raise CorruptCheckpointError(
                f"checkpoint at {where} belongs to {name} {obj[name]!r}, not {expected!r}: "
                "refusing to use another stream's or job's position"
            )
    seq = obj["sequence"]
    sub = obj["sub_sequence"]
    end = obj["shard_end"]
    if seq is not None:
        try:
            SequenceKey.parse(seq, sub)
        except ValueError as exc:
            raise CorruptCheckpointError(
                f"checkpoint at {where} has a bad position: {exc}"
            ) from None
    elif isinstance(sub, bool) or not isinstance(sub, int) or sub < 0:
        raise CorruptCheckpointError(
            f"checkpoint at {where} has a bad sub_sequence {sub!r}: expected an int >= 0"
        )
    if not isinstance(end, bool):
        raise CorruptCheckpointError(
            f"checkpoint at {where} has shard_end={end!r}: expected true or false"
        )
    start_at = _parse_time(obj.get("start_at"), where, "start_at")
    if seq is None and not end and start_at is None:
        raise CorruptCheckpointError(
            f"checkpoint at {where} has no sequence, no start_at and is not a shard end: "
            "nothing to resume from"
        )
    owner = obj.get("owner") or ""
    if not isinstance(owner, str):
        raise CorruptCheckpointError(
            f"checkpoint at {where} has owner={owner!r}: expected a string"
        )
    return Checkpoint(
        stream_name=stream,
        shard_id=shard,
        sequence_number=seq,
        sub_sequence_number=sub,
        shard_end=end,
        job_name=job,
        owner=owner,
        updated_at=_parse_time(obj.get("updated_at"), where),
        start_at=start_at,
        resets=_resets(obj.get("resets", 0), where),
    )


def _resets(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CorruptCheckpointError(
            f"checkpoint at {where} has resets={value!r}: expected an int >= 0"
        )
    return value


def _parse_time(value: Any, where: str, name: str = "updated_at") -> datetime | None:
    if value is None:
        return None
    try:
        dt = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise CorruptCheckpointError(
            f"checkpoint at {where} has {name}={value!r}: expected an ISO 8601 time"
        ) from None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _preview(value: Any, limit: int = 80) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return repr(text if len(text) <= limit else text[:limit] + "...")
