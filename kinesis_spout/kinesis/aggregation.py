"""KPL record de-aggregation, without a protobuf dependency.

A KPL aggregated record is ``MAGIC + protobuf(AggregatedRecord) + md5(protobuf)`` (the
format: aggregation-format.md of awslabs/amazon-kinesis-producer). Only the fields used
are decoded: ``AggregatedRecord`` 1 (``partition_key_table``) and 3 (``records``), each
``Record``'s 1 (``partition_key_index``) and 3 (``data``); the others (explicit hash
keys, tags) are skipped by wire type.

A payload with the magic prefix but a wrong checksum or a malformed body is passed
through as one plain record (what the KCL does), never dropped; the reader counts it as
``corrupt_aggregates`` (docs/metrics.md, "The metrics").
"""

from __future__ import annotations

import hashlib

MAGIC = b"\xf3\x89\x9a\xc2"
_DIGEST = 16


class _Malformed(Exception):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise _Malformed("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _Malformed("varint too long")


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs of one protobuf message."""
    out: list[tuple[int, int | bytes]] = []
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = _varint(buf, pos)
        num, wire = tag >> 3, tag & 7
        if wire == 0:
            val, pos = _varint(buf, pos)
            out.append((num, val))
        elif wire == 2:
            ln, pos = _varint(buf, pos)
            if pos + ln > end:
                raise _Malformed("truncated field")
            out.append((num, buf[pos : pos + ln]))
            pos += ln
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise _Malformed(f"unsupported wire type {wire}")
        if pos > end:
            raise _Malformed("truncated message")
    return out


def is_aggregated(data: bytes) -> bool:
    """True if ``data`` is a well-formed KPL aggregate (magic and checksum)."""
    if len(data) < len(MAGIC) + _DIGEST or not data.startswith(MAGIC):
        return False
    body = data[len(MAGIC) : -_DIGEST]
    return hashlib.md5(body).digest() == data[-_DIGEST:]


def deaggregate(data: bytes, partition_key: str) -> list[tuple[str, bytes]]:
    """The user records in ``data``, as ``(partition_key, data)`` pairs.

    A plain record gives ``[(partition_key, data)]``.
    """
    if not is_aggregated(data):
        return [(partition_key, data)]
    body = data[len(MAGIC) : -_DIGEST]
    try:
        keys: list[str] = []
        raw_records: list[bytes] = []
        for num, val in _fields(body):
            if num == 1 and isinstance(val, bytes):
                keys.append(val.decode("utf-8"))
            elif num == 3 and isinstance(val, bytes):
                raw_records.append(val)
        out: list[tuple[str, bytes]] = []
        for raw in raw_records:
            pk_index: int | None = None
            payload: bytes | None = None
            for num, val in _fields(raw):
                if num == 1 and isinstance(val, int):
                    pk_index = val
                elif num == 3 and isinstance(val, bytes):
                    payload = val
            if pk_index is None or payload is None or pk_index >= len(keys):
                raise _Malformed("record without partition key index or data")
            out.append((keys[pk_index], payload))
    except (_Malformed, UnicodeDecodeError):
        return [(partition_key, data)]
    return out
