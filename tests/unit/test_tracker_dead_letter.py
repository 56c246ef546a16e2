"""A given-up record is not done until its dead letter is written (hole 1 of the audit).

The tracker hands a record that ran out of retries back (GIVEN_UP) but keeps it
pending: the checkpoint cannot pass it until the caller confirms the durable
dead-letter write with ``dead_lettered``.  An interrupted write therefore leaves
the checkpoint below the record, and a restart replays it.
"""

from __future__ import annotations

from tracker import FailAction, InflightRecordTracker, SequenceKey


def k(n: int, sub: int = 0) -> SequenceKey:
    return SequenceKey(n, sub)


def tracker_with(*ns: int, retry_limit: int = 0, **kw: float) -> InflightRecordTracker[str]:
    t: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=retry_limit, **kw)  # type: ignore[arg-type]
    for n in ns:
        assert t.emitted(k(n), f"r{n}", 0.0)
    return t


def test_given_up_record_holds_the_checkpoint_until_dead_lettered() -> None:
    t = tracker_with(1, 2, 3)
    out = t.fail(k(2), error="poison")
    assert out.action is FailAction.GIVEN_UP and out.record == "r2"
    assert t.ack(k(1)) and t.ack(k(3))
    # The dead letter is not written yet: the checkpoint must stay below the record.
    assert t.checkpoint == k(1)
    assert t.in_flight == 1 and t.is_pending(k(2))
    assert t.stats.given_up_pending == 1
    assert t.dead_lettered(k(2))
    assert t.checkpoint == k(3)
    assert t.in_flight == 0
    stats = t.stats
    assert (stats.given_up, stats.given_up_pending, stats.acked) == (1, 0, 2)


def test_a_given_up_record_is_neither_retried_nor_failed_again() -> None:
    t = tracker_with(1)
    assert t.fail(k(1)).action is FailAction.GIVEN_UP
    assert t.next_retry(1e9) is None
    assert t.fail(k(1)).action is FailAction.IGNORED
    assert not t.emitted(k(1), "r1")
    assert t.stats.ignored_fails == 1


def test_an_ack_of_a_given_up_record_does_not_pass_it_before_its_dead_letter() -> None:
    t = tracker_with(1, 2)
    t.fail(k(1))
    assert not t.ack(k(1))  # counted, harmless: the dead letter is on its way
    assert t.ack_many([k(1), k(2)]) == 1
    assert t.checkpoint is None
    assert t.stats.duplicate_acks == 2
    assert t.dead_lettered(k(1))
    assert t.checkpoint == k(2)


def test_dead_lettered_of_an_unknown_or_done_key_is_ignored() -> None:
    t = tracker_with(1, 2)
    assert not t.dead_lettered(k(9))  # never emitted
    assert not t.dead_lettered(k(1))  # in flight, not given up
    assert t.ack(k(1))
    assert not t.dead_lettered(k(1))  # done
    t.fail(k(2))
    assert t.dead_lettered(k(2))
    assert not t.dead_lettered(k(2))  # twice
    assert t.checkpoint == k(2)


def test_an_expired_record_given_up_waits_for_its_dead_letter_and_expires_once() -> None:
    t = tracker_with(1, 2, message_timeout=5.0)
    outs = t.expire(6.0)
    given_up = FailAction.GIVEN_UP
    assert [(o.key, o.action) for o in outs] == [(k(1), given_up), (k(2), given_up)]
    assert t.expire(100.0) == []  # not expired twice
    assert t.stats.expired == 2
    assert t.checkpoint is None
    assert t.dead_lettered(k(1))
    assert t.checkpoint == k(1)
    assert t.dead_lettered(k(2))
    assert t.checkpoint == k(2)


def test_dead_lettered_many_counts_what_took_effect() -> None:
    t = tracker_with(1, 2, 3)
    t.fail(k(1))
    t.fail(k(3))
    assert t.dead_lettered_many([k(1), k(2), k(3)]) == 2
    assert t.ack(k(2))
    assert t.checkpoint == k(3)
