"""The adapter's calls into the spout, with one error policy for all of them.

A *retriable* :class:`~kinesis_spout.errors.KinesisSpoutError` raised by the spout
(throttling, a checkpoint store that cannot be reached, a lost lease) never ends
the conversation: it is logged (ERROR for checkpoint store errors and lost leases,
WARNING for Kinesis throttling and the like) with the shard when the error names
one, counted in :attr:`SpoutBridge.errors`, and the command is answered as if the
call had done nothing (no records; an ack or fail not applied, so the record
stays in flight in the spout and its timeout replays it). Anything else (a
non-retriable error, a bug) propagates and is fatal for the process.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

from kinesis_spout.errors import CheckpointError, KinesisSpoutError, LeaseLostError
from kinesis_spout.multilang.tuples import SpoutLike, SpoutRecord

log = logging.getLogger(__name__)

T = TypeVar("T")


class SpoutBridge:
    """Calls ``spout`` on behalf of the adapter; see the module docstring."""

    def __init__(self, spout: SpoutLike) -> None:
        self.spout = spout
        self.errors = 0
        """Retriable errors raised by the spout and survived (logged each time)."""
        self.errors_by_call: Counter[str] = Counter()

    def next_batch(self, max_records: int) -> Sequence[SpoutRecord]:
        """Up to ``max_records`` records; none when the spout raised a retriable error."""
        return self._call("reading", lambda: self.spout.next_batch(max_records), ())

    def ack(self, message_id: str) -> bool:
        """Ack ``message_id``; False when the spout raised a retriable error."""
        return self._call(f"ack of {message_id}", lambda: _done(self.spout.ack(message_id)), False)

    def fail(self, message_id: str, reason: str) -> bool:
        """Fail ``message_id``; False when the spout raised a retriable error."""
        return self._call(
            f"fail of {message_id}", lambda: _done(self.spout.fail(message_id, reason)), False
        )

    def checkpoint(self) -> None:
        """Offer a (not forced) checkpoint."""
        self._call("checkpoint", lambda: _done(self.spout.checkpoint()), False)

    def _call(self, what: str, call: Callable[[], T], fallback: T) -> T:
        try:
            return call()
        except KinesisSpoutError as exc:
            if not exc.retriable:
                raise
            self._survived(what, exc)
            return fallback

    def _survived(self, what: str, exc: KinesisSpoutError) -> None:
        self.errors += 1
        self.errors_by_call[what.split(" ", 1)[0]] += 1
        shard = getattr(exc, "shard_id", None)
        level = (
            logging.ERROR if isinstance(exc, CheckpointError | LeaseLostError) else logging.WARNING
        )
        log.log(
            level,
            "%s failed (%s%s: %s); will retry (%d spout errors so far)",
            what,
            type(exc).__name__,
            f", shard {shard}" if shard else "",
            exc,
            self.errors,
        )


def _done(_: object) -> bool:
    return True
