"""Hole 1: a given-up record's dead letter is durable before the checkpoint can pass it.

The dead-letter write is interrupted by a ``KeyboardInterrupt`` (a second
Ctrl-C or SIGTERM during the write); the spout is then closed, which writes its
checkpoints.  The stored checkpoint must stay below the record, so a restart
replays it: nothing is lost even though no dead letter was written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from test_spout import Rig, S

from kinesis_spout.deadletter import DeadLetter
from kinesis_spout.records import Record


class InterruptedSink:
    """A dead-letter sink whose first write is interrupted (then works)."""

    def __init__(self) -> None:
        self.entries: list[Record] = []
        self.interrupt = True

    def write_many(self, letters: Sequence[DeadLetter]) -> None:
        if self.interrupt:
            self.interrupt = False
            raise KeyboardInterrupt
        self.entries.extend(d.record for d in letters)

    def close(self) -> None:
        pass


def rig_with_interrupted_sink() -> tuple[Rig, InterruptedSink]:
    r = Rig(retry_limit=0)
    sink = InterruptedSink()
    r.spout.acks.sink = sink  # noqa: SLF001  (the rig builds the spout with a list sink)
    return r, sink


def test_an_interrupted_dead_letter_write_keeps_the_checkpoint_below_the_record() -> None:
    r, sink = rig_with_interrupted_sink()
    r.kinesis.put_many(S[0], 3)
    r.open()
    a, b, c = r.spout.next_batch(3)
    r.spout.ack_many([a, c])
    with contextlib.suppress(KeyboardInterrupt):
        r.spout.fail(b, "poison")
    # What a caller does on Ctrl-C: close, which writes the checkpoints.  The close
    # retries the pending dead letter first; make that fail too so it cannot pass b.
    sink.interrupt = False
    r.sink.failing = True
    r.spout.acks.sink = r.sink  # noqa: SLF001
    r.spout.close()
    cp = r.cp(S[0])
    assert cp is not None and cp.key == a.key  # below the record, so it is replayed


def test_the_interrupted_dead_letter_is_written_once_on_the_next_flush() -> None:
    r, sink = rig_with_interrupted_sink()
    r.kinesis.put_many(S[0], 3)
    r.open()
    a, b, c = r.spout.next_batch(3)
    r.spout.ack_many([a, c])
    with contextlib.suppress(KeyboardInterrupt):
        r.spout.fail(b, "poison")
    assert r.spout.stats().dead_lettered == 0
    r.spout.checkpoint(force=True)  # the pending write is retried before the save
    assert [e.key for e in sink.entries] == [b.key]
    cp = r.cp(S[0])
    assert cp is not None and cp.key == c.key
    assert r.spout.stats().dead_lettered == 1
    r.spout.close()
    assert [e.key for e in sink.entries] == [b.key]
