"""Storm multilang: run the Kinesis spout as a ShellSpout child process.

``python -m kinesis_spout.multilang --config job.toml`` speaks Storm's
multilang protocol on stdin/stdout (see ``docs/multilang.md``):

* :mod:`.protocol` — framing (JSON + ``end`` lines), nothing else;
* :mod:`.adapter` — handshake, command dispatch, emits, logs, sync, around
  any object with the spout's shape;
* :mod:`.main` — the command: settings from the config file, the Storm conf
  and flags; stdout reserved for the protocol.
"""

from __future__ import annotations

from kinesis_spout.multilang.adapter import (
    OUTPUT_FIELDS,
    ExitCode,
    MultilangOptions,
    ShellSpoutAdapter,
    SpoutLike,
    StormContext,
    StormLogHandler,
    decode_data,
    encode_tuple,
    output_fields,
)
from kinesis_spout.multilang.protocol import MessageReader, MessageWriter, ProtocolError, frame

__all__ = [
    "OUTPUT_FIELDS",
    "ExitCode",
    "MessageReader",
    "MessageWriter",
    "MultilangOptions",
    "ProtocolError",
    "ShellSpoutAdapter",
    "SpoutLike",
    "StormContext",
    "StormLogHandler",
    "decode_data",
    "encode_tuple",
    "frame",
    "output_fields",
]
