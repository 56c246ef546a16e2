"""Storm multilang framing: JSON, a line ``end``, nothing else."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.multilang.protocol import MessageReader, MessageWriter, ProtocolError, frame


def reader(data: bytes, max_bytes: int = 1 << 20) -> MessageReader:
    return MessageReader(io.BytesIO(data), max_bytes=max_bytes)


def test_frame_is_one_ascii_json_line_then_end() -> None:
    assert frame({"command": "sync"}) == b'{"command":"sync"}\nend\n'
    framed = frame({"msg": "two\nlines", "text": "caf\u00e9 \u2603"})
    assert framed.count(b"\n") == 2  # the newline inside the string is escaped
    assert framed.isascii()


def test_reads_messages_in_order_then_none_at_clean_eof() -> None:
    r = reader(frame({"a": 1}) + frame([1, 2]) + frame("x"))
    assert r.read() == {"a": 1}
    assert r.read() == [1, 2]
    assert r.read() == "x"
    assert r.read() is None
    assert r.read() is None
    assert r.messages == 3


def test_accepts_pretty_printed_json_and_crlf() -> None:
    r = reader(b'{\n  "command":\n  "next"\n}\r\nend\r\n')
    assert r.read() == {"command": "next"}
    assert r.read() is None


def test_trailing_blank_lines_are_a_clean_eof() -> None:
    r = reader(frame({"a": 1}) + b"\n\n")
    assert r.read() == {"a": 1}
    assert r.read() is None


def test_eof_inside_a_message_is_an_error_naming_it() -> None:
    r = reader(frame({"a": 1}) + b'{"command": "next"}\n')
    r.read()
    with pytest.raises(ProtocolError, match=r"input ended inside message #2.*command"):
        r.read()


def test_eof_without_newline_inside_a_message() -> None:
    with pytest.raises(ProtocolError, match="input ended inside message #1"):
        reader(b'{"command": "ne').read()


def test_invalid_json_is_an_error_with_position_and_text() -> None:
    with pytest.raises(ProtocolError, match=r"message #1 is not valid JSON .*line 1.*nope"):
        reader(b"{nope}\nend\n").read()


def test_empty_message_is_an_error() -> None:
    with pytest.raises(ProtocolError, match="message #1 is empty"):
        reader(b"end\n").read()


def test_non_utf8_is_an_error() -> None:
    with pytest.raises(ProtocolError, match="not UTF-8"):
        reader(b'"\xff\xfe"\nend\n').read()


def test_oversized_message_is_refused_without_reading_it_all() -> None:
    big = b'"' + b"x" * 5000 + b'"\nend\n'
    with pytest.raises(ProtocolError, match="larger than 1000 bytes"):
        reader(big, max_bytes=1000).read()
    many_lines = b"[\n" + b"1,\n" * 1000 + b"1]\nend\n"
    with pytest.raises(ProtocolError, match="larger than 1000 bytes"):
        reader(many_lines, max_bytes=1000).read()


def test_protocol_error_is_a_project_error() -> None:
    assert issubclass(ProtocolError, KinesisSpoutError)
    assert not ProtocolError.retriable


def test_writer_sends_nothing_until_flush() -> None:
    out = io.BytesIO()
    w = MessageWriter(out)
    w.write({"pid": 7})
    w.write({"command": "sync"})
    assert out.getvalue() == b""
    w.flush()
    assert out.getvalue() == b'{"pid":7}\nend\n{"command":"sync"}\nend\n'
    assert w.messages == 2


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(st.lists(json_values, max_size=5))
def test_round_trip_any_json(values: list[Any]) -> None:
    data = b"".join(frame(v) for v in values)
    r = reader(data)
    got = [r.read() for _ in values]
    assert json.dumps(got) == json.dumps(values)
    assert r.read() is None
