"""Python log records sent to Storm as multilang ``log`` messages."""

from __future__ import annotations

import logging
import threading
from collections import deque

_QUEUE_NAME = "kinesis_spout.multilang.adapter"
"""The name in the "log messages dropped" line (where the handler lived before)."""

# Storm's ShellLogLevel numbers, used in the optional "level" of a log message.
_STORM_LEVEL = {
    logging.DEBUG: 1,
    logging.INFO: 2,
    logging.WARNING: 3,
    logging.ERROR: 4,
    logging.CRITICAL: 4,
}


class StormLogHandler(logging.Handler):
    """Queues log records; the adapter sends them as Storm ``log`` messages
    before its next ``sync`` (never in the middle of an exchange, and never
    before the handshake reply). Holds at most ``capacity`` records; older
    ones are dropped and counted."""

    def __init__(self, level: int = logging.INFO, capacity: int = 1000) -> None:
        super().__init__(level)
        self._queue: deque[tuple[int, str]] = deque(maxlen=capacity)
        self._queue_lock = threading.Lock()
        self.dropped = 0
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # logging must never break the protocol
            self.handleError(record)
            return
        with self._queue_lock:
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1
            self._queue.append((_STORM_LEVEL.get(record.levelno, 2), text))

    def drain(self) -> list[tuple[int, str]]:
        """Queued ``(storm_level, text)`` pairs, oldest first; empties the queue."""
        with self._queue_lock:
            items = list(self._queue)
            self._queue.clear()
            dropped, self.dropped = self.dropped, 0
        if dropped:
            items.append((3, f"{_QUEUE_NAME}: {dropped} log messages dropped (queue full)"))
        return items
