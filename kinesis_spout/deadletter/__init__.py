"""Dead letters: where records that ran out of retries go, with their error, exactly once.

``base`` (the letter, the sink protocol, the log-only and filtering sinks); a module per
target, ``jsonl`` (a directory, the default) and ``s3`` (``s3://bucket/prefix``); ``open``
(the sink a config names); ``cli`` (``dead-letters list|redrive``) with ``redrive`` (at
most once per entry) and ``remove`` (``--delete``).
"""

from __future__ import annotations

from kinesis_spout.deadletter.base import (
    REASONS,
    DeadLetter,
    DeadLetterSink,
    FilteredDeadLetterSink,
    LoggingDeadLetterSink,
    dead_letter_entry,
)
from kinesis_spout.deadletter.jsonl import (
    JsonlDeadLetterSink,
    entry_ids,
    read_dead_letters,
    same_file,
)
from kinesis_spout.deadletter.open import open_dead_letter_sink

__all__ = [
    "REASONS",
    "DeadLetter",
    "DeadLetterSink",
    "FilteredDeadLetterSink",
    "JsonlDeadLetterSink",
    "LoggingDeadLetterSink",
    "dead_letter_entry",
    "entry_ids",
    "open_dead_letter_sink",
    "read_dead_letters",
    "same_file",
]
