"""Storm multilang framing: one JSON value per message, then a line ``end``.

Storm's ``ShellProcess`` writes ``<json>\\nend\\n`` and reads lines until a line
that is exactly ``end``; the lines before it, joined, are the JSON text. This
module does exactly that in both directions, on binary streams, and nothing
else: no command semantics (see :mod:`kinesis_spout.multilang.adapter`).

Contracts:

* :meth:`MessageReader.read` returns the decoded JSON value, or ``None`` when
  the stream ends cleanly *between* messages. A stream that ends inside a
  message, a message that is not UTF-8 JSON, an empty message, or one larger
  than ``max_bytes`` raise :class:`ProtocolError` naming the problem.
* :meth:`MessageWriter.write` buffers one framed message; nothing reaches the
  parent until :meth:`MessageWriter.flush`. Output is plain ASCII JSON, one
  line per message (newlines inside strings are escaped by the encoder).
"""

from __future__ import annotations

import json
from typing import IO, Any

from kinesis_spout.errors import KinesisSpoutError

END = b"end"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class ProtocolError(KinesisSpoutError):
    """The parent process sent something that is not Storm's multilang protocol."""


def frame(obj: Any) -> bytes:
    """The bytes of one message: compact ASCII JSON, ``\\n``, ``end``, ``\\n``."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("ascii") + b"\nend\n"


def _snippet(data: bytes, limit: int = 80) -> str:
    text = data.decode("utf-8", errors="replace")
    return repr(text[:limit] + ("..." if len(text) > limit else ""))


class MessageReader:
    """Reads framed messages from a binary stream (the child's stdin)."""

    def __init__(self, stream: IO[bytes], max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.stream = stream
        self.max_bytes = max_bytes
        self.messages = 0

    def read(self) -> Any:
        """The next message's JSON value; ``None`` at a clean end of stream."""
        lines: list[bytes] = []
        size = 0
        while True:
            line = self.stream.readline(self.max_bytes + 1)
            if not line:
                body = b"".join(lines)
                if not body.strip():
                    return None
                raise ProtocolError(
                    f"input ended inside message #{self.messages + 1} (no 'end' line after "
                    f"{_snippet(body)})"
                )
            if line.rstrip(b"\r\n") == END:
                break
            size += len(line)
            if size > self.max_bytes:
                raise ProtocolError(
                    f"message #{self.messages + 1} is larger than {self.max_bytes} bytes "
                    f"without an 'end' line (starts {_snippet(b''.join(lines) or line)})"
                )
            lines.append(line)
        self.messages += 1
        body = b"".join(lines)
        if not body.strip():
            raise ProtocolError(f"message #{self.messages} is empty (an 'end' line with no JSON)")
        try:
            return json.loads(body.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ProtocolError(
                f"message #{self.messages} is not UTF-8 ({exc.reason} at byte {exc.start}): "
                f"{_snippet(body)}"
            ) from None
        except json.JSONDecodeError as exc:
            raise ProtocolError(
                f"message #{self.messages} is not valid JSON ({exc.msg} at line {exc.lineno} "
                f"column {exc.colno}): {_snippet(body)}"
            ) from None


class MessageWriter:
    """Writes framed messages to a binary stream (the child's real stdout)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self._buffer: list[bytes] = []
        self.messages = 0

    def write(self, obj: Any) -> None:
        """Queue one message (sent by the next :meth:`flush`)."""
        self._buffer.append(frame(obj))
        self.messages += 1

    def flush(self) -> None:
        """Send everything queued, then flush the stream."""
        if self._buffer:
            self.stream.write(b"".join(self._buffer))
            self._buffer.clear()
        self.stream.flush()
