"""InflightRecordTracker: retries, dead letters, timeouts, back-pressure, counters, memory."""

from __future__ import annotations

import random

import pytest

from tracker import (
    ExponentialBackoff,
    FailAction,
    InflightRecordTracker,
    RetryItem,
    SequenceKey,
    TrackerStats,
)


def k(n: int, sub: int = 0) -> SequenceKey:
    return SequenceKey(n, sub)


def emit_all(tracker: InflightRecordTracker[str], *ns: int, now: float = 0.0) -> None:
    for n in ns:
        assert tracker.emitted(k(n), f"r{n}", now)


# ----------------------------------------------------------------- construction


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"retry_limit": -1}, "retry_limit"),
        ({"retry_limit": 1.5}, "retry_limit"),
        ({"retry_limit": True}, "retry_limit"),
        ({"retry_limit": 1, "max_in_flight": 0}, "max_in_flight"),
        ({"retry_limit": 1, "max_in_flight": 2.0}, "max_in_flight"),
        ({"retry_limit": 1, "message_timeout": 0}, "message_timeout"),
        ({"retry_limit": 1, "message_timeout": float("inf")}, "message_timeout"),
        ({"retry_limit": 1, "message_timeout": float("nan")}, "message_timeout"),
        ({"retry_limit": 1, "backoff": object()}, "backoff"),
    ],
)
def test_constructor_rejects_bad_arguments_naming_them(
    kwargs: dict[str, object], name: str
) -> None:
    with pytest.raises(ValueError, match=name):
        InflightRecordTracker(**kwargs)  # type: ignore[arg-type]


def test_fresh_tracker() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=2)
    assert tracker.checkpoint is None
    assert tracker.latest is None
    assert tracker.in_flight == 0
    assert tracker.can_emit
    assert tracker.next_retry(1e9) is None
    assert tracker.next_retry_at() is None
    assert tracker.expire(1e9) == []
    assert list(tracker.pending()) == []
    assert len(tracker) == 0
    assert tracker.stats == TrackerStats(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    assert "in_flight=0" in repr(tracker)


# ----------------------------------------------------------------- ordering and keys


def test_checkpoint_is_numeric_not_lexical() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=0)
    nine, ten = SequenceKey.parse("9"), SequenceKey.parse("10")
    assert "9" > "10" and nine < ten
    assert tracker.emitted(nine)
    assert tracker.emitted(ten)  # a new key: 10 > 9 numerically
    assert not tracker.emitted(SequenceKey.parse("8"))  # a re-read, not a new record
    tracker.ack(ten)
    assert tracker.checkpoint is None
    tracker.ack(nine)
    assert tracker.checkpoint == ten


def test_huge_sequence_numbers_and_sub_sequences() -> None:
    real = "49590338271490256608559692538361571095921575989136588898"  # 56 digits, ~2**185
    widest = "9" * 129
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=0)
    keys = [
        SequenceKey.parse(str(2**128 - 1)),
        SequenceKey.parse(str(2**128)),
        SequenceKey.parse(real),
        SequenceKey.parse(real, 1),
        SequenceKey.parse(real, 2),
        SequenceKey.parse(widest),
    ]
    for key in keys:
        assert tracker.emitted(key)
    assert not tracker.emitted(SequenceKey.parse(real, 1))  # re-read of a de-aggregated record
    assert tracker.ack_many(reversed(keys[1:])) == 5
    assert tracker.checkpoint is None
    assert tracker.ack(keys[0])
    assert tracker.checkpoint == keys[-1]
    assert str(tracker.checkpoint) == widest


def test_sub_sequence_keys_checkpoint_inside_an_aggregate() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=0)
    agg = [k(100, sub) for sub in range(4)]
    for key in agg + [k(101)]:
        tracker.emitted(key)
    tracker.ack_many([agg[0], agg[1], agg[3]])
    assert tracker.checkpoint == k(100, 1)  # resume inside the aggregate, after sub 1
    tracker.ack(agg[2])
    assert tracker.checkpoint == k(100, 3)


# ------------------------------------------------------------------- retries


def test_retry_limit_zero_gives_up_on_first_fail_and_still_checkpoints() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=0)
    emit_all(tracker, 1, 2, 3)
    out = tracker.fail(k(1), error="boom")
    assert out.action is FailAction.GIVEN_UP
    assert (out.key, out.record, out.attempts, out.retry_at, out.error) == (
        k(1),
        "r1",
        1,
        None,
        "boom",
    )
    assert tracker.checkpoint is None  # given up: done once its dead letter is written
    assert tracker.dead_lettered(k(1))
    assert tracker.checkpoint == k(1)
    assert tracker.ack(k(2))
    assert tracker.checkpoint == k(2)
    assert tracker.in_flight == 1
    assert tracker.stats.given_up == 1
    assert tracker.next_retry(1e9) is None


def test_retry_limit_three_means_four_deliveries() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=3)
    emit_all(tracker, 1)
    for delivery in (1, 2, 3):
        out = tracker.fail(k(1), now=float(delivery))
        assert out.action is FailAction.RETRY
        assert out.attempts == delivery
        assert out.retry_at == float(delivery)  # no backoff: due at once
        item = tracker.next_retry(now=float(delivery))
        assert item == RetryItem(k(1), "r1", delivery + 1)
        assert tracker.emitted(item.key, item.record, now=float(delivery))
    out = tracker.fail(k(1), now=4.0, error="still broken")
    assert out.action is FailAction.GIVEN_UP
    assert out.attempts == 4
    assert out.record == "r1"
    assert tracker.dead_lettered(k(1))
    assert tracker.checkpoint == k(1)
    stats = tracker.stats
    assert (stats.retried, stats.given_up, stats.acked, stats.in_flight) == (3, 1, 0, 0)


def test_given_up_record_is_handed_back_exactly_once() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=0)
    emit_all(tracker, 1, 2)
    first = tracker.fail(k(1))
    assert first.action is FailAction.GIVEN_UP and first.record == "r1"
    assert tracker.dead_lettered(k(1))
    again = tracker.fail(k(1))
    assert again.action is FailAction.IGNORED and again.record is None
    assert not tracker.ack(k(1))  # a late ack after the dead letter: counted, harmless
    assert not tracker.emitted(k(1), "r1")
    stats = tracker.stats
    assert (stats.ignored_fails, stats.duplicate_acks, stats.ignored_emits) == (1, 1, 1)
    assert tracker.checkpoint == k(1)


def test_backoff_orders_retries_and_ties_break_by_emit_order() -> None:
    backoff = ExponentialBackoff(base=1.0, factor=2.0, cap=10.0)
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=5, backoff=backoff)
    emit_all(tracker, 1, 2, 3, 4)
    # 4 fails first, then 3, both due at 1.0: emit order decides (3 before 4).
    assert tracker.fail(k(4), now=0.0).retry_at == 1.0
    assert tracker.fail(k(3), now=0.0).retry_at == 1.0
    assert tracker.fail(k(2), now=0.5).retry_at == 1.5
    assert tracker.next_retry_at() == 1.0
    assert tracker.next_retry(now=0.99) is None
    first = tracker.next_retry(now=1.0)
    assert first == RetryItem(k(3), "r3", 2)
    assert tracker.next_retry(now=1.0) == first  # not marked emitted until emitted() is called
    tracker.emitted(k(3), "r3", now=1.0)
    assert tracker.next_retry(now=1.0) == RetryItem(k(4), "r4", 2)
    tracker.emitted(k(4), "r4", now=1.0)
    assert tracker.next_retry(now=1.2) is None
    assert tracker.next_retry_at() == 1.5
    tracker.emitted(k(2), "r2", now=1.5)
    # Second failure of 3: delay(2) = 2.0.
    assert tracker.fail(k(3), now=2.0).retry_at == 4.0
    assert tracker.stats.pending_retries == 1
    assert tracker.next_retry(now=4.0) == RetryItem(k(3), "r3", 3)


def test_retry_emit_may_replace_the_record() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=2)
    emit_all(tracker, 1)
    tracker.fail(k(1))
    assert tracker.emitted(k(1), "r1-refetched")
    tracker.fail(k(1))
    item = tracker.next_retry()
    assert item is not None and item.record == "r1-refetched"
    assert tracker.emitted(k(1))  # None keeps the stored record
    out = tracker.fail(k(1))
    assert out.action is FailAction.GIVEN_UP and out.record == "r1-refetched"


def test_fail_of_a_record_awaiting_retry_is_ignored() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=1)
    emit_all(tracker, 1)
    assert tracker.fail(k(1)).action is FailAction.RETRY
    out = tracker.fail(k(1))
    assert out.action is FailAction.IGNORED and out.attempts == 1
    assert tracker.stats.ignored_fails == 1
    assert tracker.next_retry() == RetryItem(k(1), "r1", 2)  # still one retry, not given up


def test_late_ack_of_a_record_awaiting_retry_is_done_and_leaves_no_stale_entry() -> None:
    backoff = ExponentialBackoff(base=10.0)
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=3, backoff=backoff)
    emit_all(tracker, 1, 2, 3)
    tracker.fail(k(1), now=0.0)  # due at 10
    tracker.fail(k(3), now=5.0)  # due at 15
    assert tracker.ack(k(1))  # the late ack wins: done, retry cancelled
    assert tracker.stats.late_acks == 1
    assert tracker.next_retry_at() == 15.0  # the stale entry for 1 does not show
    assert tracker.next_retry(now=12.0) is None
    assert tracker.next_retry(now=15.0) == RetryItem(k(3), "r3", 2)
    tracker.ack(k(2))
    assert tracker.checkpoint == k(2)  # nothing stalls on 1
    assert not tracker.emitted(k(1))  # the cancelled retry cannot be emitted
    assert tracker.fail(k(1)).action is FailAction.IGNORED


def test_stale_retry_entries_do_not_accumulate() -> None:
    tracker: InflightRecordTracker[int] = InflightRecordTracker(
        retry_limit=1, backoff=ExponentialBackoff(base=100.0)
    )
    tracker.emitted(k(0))
    tracker.fail(k(0), now=0.0)  # one long-lived retry keeps the heap non-empty
    for n in range(1, 5000):
        tracker.emitted(k(n))
        tracker.fail(k(n), now=float(n))
        tracker.ack(k(n))  # late: the heap entry goes stale
    assert tracker.stats.pending_retries == 1
    assert len(tracker._heap) <= 2 * 1 + 33
    assert tracker.next_retry(now=1e9) == RetryItem(k(0), None, 2)


def test_fail_many_and_ack_many_report_per_key() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=0)
    emit_all(tracker, 1, 2, 3, 4)
    outs = tracker.fail_many([(k(2), "e2"), (k(9), "e9"), (k(2), "again")], now=3.0)
    assert [o.action for o in outs] == [
        FailAction.GIVEN_UP,
        FailAction.IGNORED,
        FailAction.IGNORED,
    ]
    assert [o.error for o in outs] == ["e2", "e9", "again"]
    assert tracker.dead_lettered(k(2))
    assert tracker.ack_many([k(1), k(1), k(3), k(7), k(2)]) == 2
    stats = tracker.stats
    assert (stats.duplicate_acks, stats.unknown_acks, stats.ignored_fails) == (2, 1, 2)
    assert tracker.checkpoint == k(3)


# ------------------------------------------------------------ counted oddities


def test_duplicate_unknown_and_malformed_acks_are_counted_not_raised() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=1)
    assert not tracker.ack(k(1))  # nothing emitted yet: unknown
    emit_all(tracker, 5, 6)
    assert tracker.ack(k(6))
    assert not tracker.ack(k(6))  # duplicate (done, kept as a run representative)
    assert not tracker.ack(k(3))  # before the latest emitted: treated as done
    assert not tracker.ack(k(7))  # after the latest emitted: unknown
    assert not tracker.ack("shardId-000:5")  # type: ignore[arg-type]
    assert tracker.ack_many([k(8), "junk"]) == 0  # type: ignore[list-item]
    stats = tracker.stats
    assert (stats.acked, stats.duplicate_acks, stats.unknown_acks) == (1, 2, 5)
    assert tracker.checkpoint is None
    assert tracker.in_flight == 1


def test_ignored_emits() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=1)
    emit_all(tracker, 10, 20)
    assert not tracker.emitted(k(20))  # in flight: a duplicate delivery, not a retry
    assert not tracker.emitted(k(15))  # below the latest: a re-read
    tracker.ack(k(10))
    assert not tracker.emitted(k(10))  # done
    assert tracker.stats.ignored_emits == 3
    assert tracker.stats.emitted == 2
    assert tracker.latest == k(20)


# ------------------------------------------------------------------- timeout


def test_expire_fails_deliveries_older_than_the_timeout() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=1, message_timeout=30.0)
    emit_all(tracker, 1, now=0.0)
    emit_all(tracker, 2, now=10.0)
    emit_all(tracker, 3, now=20.0)
    tracker.ack(k(2))
    assert tracker.expire(30.0) == []  # exactly 30 s old: not older than the timeout
    outs = tracker.expire(31.0)
    assert [(o.key, o.action) for o in outs] == [(k(1), FailAction.RETRY)]
    assert outs[0].error is not None and "timeout" in outs[0].error
    assert tracker.expire(31.0) == []
    # The retry is a new delivery with its own deadline.
    item = tracker.next_retry(31.0)
    assert item is not None
    tracker.emitted(item.key, item.record, now=31.0)
    assert [o.key for o in tracker.expire(51.0)] == [k(3)]
    outs = tracker.expire(62.0)
    assert [(o.key, o.action, o.record) for o in outs] == [(k(1), FailAction.GIVEN_UP, "r1")]
    assert tracker.stats.expired == 3
    assert tracker.checkpoint is None  # 1 waits for its dead letter
    assert tracker.dead_lettered(k(1))
    assert tracker.checkpoint == k(2)  # 3 still awaits its retry


def test_expire_skips_records_awaiting_retry_and_done_ones() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=5, message_timeout=1.0)
    emit_all(tracker, 1, 2, 3)
    tracker.fail(k(1))
    tracker.ack(k(2))
    assert [o.key for o in tracker.expire(5.0)] == [k(3)]


def test_expire_is_a_no_op_without_a_timeout() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=1)
    emit_all(tracker, 1)
    assert tracker.expire(1e12) == []
    assert tracker.in_flight == 1


def test_timeout_memory_stays_bounded_when_expire_is_never_called() -> None:
    tracker: InflightRecordTracker[None] = InflightRecordTracker(
        retry_limit=1, message_timeout=30.0
    )
    tracker.emitted(k(0))  # one record stays in flight throughout
    for n in range(1, 20_000):
        tracker.emitted(k(n), now=float(n))
        tracker.ack(k(n))
        assert len(tracker._tq_at) <= 2 * (tracker.in_flight + 1) + 64
    assert len(tracker._tq_at) == len(tracker._tq_key)
    assert [o.key for o in tracker.expire(1e9)] == [k(0)]


# -------------------------------------------------------------- back-pressure


def test_can_emit_is_back_pressure_for_new_records() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=2, max_in_flight=2)
    emit_all(tracker, 1)
    assert tracker.can_emit
    emit_all(tracker, 2)
    assert not tracker.can_emit
    tracker.fail(k(1))  # awaiting a retry is still in flight
    assert not tracker.can_emit
    item = tracker.next_retry()
    assert item is not None and tracker.emitted(item.key, item.record)  # retries go out anyway
    tracker.ack(k(2))
    assert tracker.can_emit
    tracker.fail(k(1))
    tracker.fail(k(1))
    assert tracker.fail(k(1)).action is FailAction.IGNORED  # awaiting its second retry
    assert tracker.in_flight == 1 and tracker.can_emit


# ------------------------------------------------------------ checkpoint, memory


@pytest.mark.parametrize("seed", range(5))
def test_checkpoint_never_decreases_and_nodes_collapse(seed: int) -> None:
    rng = random.Random(seed)
    tracker: InflightRecordTracker[int] = InflightRecordTracker(retry_limit=1)
    done: set[int] = set()
    emitted = 0
    last = None
    for _ in range(3000):
        if emitted < 1000 and rng.random() < 0.6:
            tracker.emitted(k(emitted), emitted)
            emitted += 1
        else:
            pending = list(tracker.pending())
            if not pending:
                continue
            key = rng.choice(pending)
            if rng.random() < 0.1:
                out = tracker.fail(key)
                if out.action is FailAction.GIVEN_UP:
                    assert tracker.dead_lettered(key)
                    done.add(key.sequence)
            elif tracker.ack(key):
                done.add(key.sequence)
            item = tracker.next_retry()
            if item is not None:
                tracker.emitted(item.key, item.record)
        checkpoint = tracker.checkpoint
        if last is not None:
            assert checkpoint is not None and checkpoint >= last
        last = checkpoint
        assert len(tracker) <= 3 * tracker.in_flight + 64
        tracker._nodes()  # checks the layout
        prefix = 0
        while prefix in done:
            prefix += 1
        assert checkpoint == (k(prefix - 1) if prefix else None)


@pytest.mark.parametrize("seed", range(3))
def test_compaction_keeps_the_collapsed_list_and_stays_bounded(seed: int) -> None:
    """Thousands in flight, random acks, fails and retries: compactions happen often."""
    rng = random.Random(seed)
    tracker: InflightRecordTracker[int] = InflightRecordTracker(retry_limit=2)
    order: list[int] = []
    done: set[int] = set()
    nxt = 0
    for step in range(6000):
        if nxt < 3000 and rng.random() < 0.55:
            assert tracker.emitted(k(nxt), nxt)
            order.append(nxt)
            nxt += 1
        else:
            pending = [n for n in order if n not in done]
            if not pending:
                continue
            n = rng.choice(pending[:50] if rng.random() < 0.2 else pending)
            if rng.random() < 0.15:
                if tracker.fail(k(n)).action is FailAction.GIVEN_UP:
                    assert tracker.dead_lettered(k(n))
                    done.add(n)
            elif rng.random() < 0.5:
                assert tracker.ack(k(n))
                done.add(n)
            else:
                batch = rng.sample(pending, min(len(pending), rng.randrange(1, 20)))
                assert tracker.ack_many([k(m) for m in batch]) == len(batch)
                done.update(batch)
            item = tracker.next_retry()
            if item is not None:
                assert tracker.emitted(item.key, item.record)
        assert len(tracker) <= 3 * tracker.in_flight + 64
        if step % 7 == 0:
            expected: list[tuple[SequenceKey, bool]] = []
            for n in order:
                if n not in done:
                    expected.append((k(n), False))
                elif expected and expected[-1][1]:
                    expected[-1] = (k(n), True)
                elif expected:
                    expected.append((k(n), True))
            assert tracker._nodes() == expected
            prefix = 0
            while prefix < len(order) and order[prefix] in done:
                prefix += 1
            assert tracker.checkpoint == (k(order[prefix - 1]) if prefix else None)
            assert list(tracker.pending()) == [k(n) for n in order if n not in done]


def test_slot_lists_are_released_when_the_tracker_drains() -> None:
    tracker: InflightRecordTracker[None] = InflightRecordTracker(retry_limit=0)
    keys = [k(n) for n in range(10_000)]
    for key in keys:
        tracker.emitted(key)
    shuffled = keys[:]
    random.Random(1).shuffle(shuffled)
    assert tracker.ack_many(shuffled[:-1]) == len(keys) - 1
    assert len(tracker) <= 3 * 1 + 64  # compacted: bounded by in-flight
    assert tracker.ack(shuffled[-1])
    assert tracker.checkpoint == keys[-1]
    assert len(tracker) == 0 and len(tracker._keys) == 0  # released once drained
    tracker.emitted(k(20_000))
    assert tracker._nodes() == [(k(20_000), False)]


def test_pending_is_a_snapshot_in_emit_order() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=1)
    emit_all(tracker, 1, 2, 3, 4)
    tracker.fail(k(2))
    snapshot = tracker.pending()
    tracker.ack(k(3))
    assert list(snapshot) == [k(1), k(2), k(3), k(4)]
    assert list(tracker.pending()) == [k(1), k(2), k(4)]
    assert tracker.is_pending(k(2)) and not tracker.is_pending(k(3))


def test_resume_after_a_restored_checkpoint() -> None:
    restored = k(500, 2)
    tracker: InflightRecordTracker[str] = InflightRecordTracker(
        retry_limit=1, resume_after=restored
    )
    assert tracker.checkpoint == restored and tracker.latest == restored
    assert not tracker.emitted(k(500, 1))  # re-read from inside the aggregate: already done
    assert not tracker.emitted(restored)
    assert tracker.emitted(k(500, 3))
    assert tracker.emitted(k(501))
    assert tracker.ack(k(501))
    assert tracker.checkpoint == restored  # never below the restored one
    assert tracker.ack(k(500, 3))
    assert tracker.checkpoint == k(501)


@pytest.mark.parametrize("bad", [(5, 0), SequenceKey(-1, 0), SequenceKey(1, -1), "5"])
def test_resume_after_must_be_a_valid_key(bad: object) -> None:
    with pytest.raises(ValueError, match="resume_after"):
        InflightRecordTracker(retry_limit=1, resume_after=bad)  # type: ignore[arg-type]


def test_ack_many_leaves_the_list_consistent_if_a_key_is_unusable() -> None:
    tracker: InflightRecordTracker[str] = InflightRecordTracker(retry_limit=1)
    emit_all(tracker, 1, 2, 3)
    with pytest.raises(TypeError):
        tracker.ack_many([k(1), [2]])  # type: ignore[list-item]
    assert tracker.checkpoint == k(1)
    assert tracker._nodes() == [(k(2), False), (k(3), False)]
    assert tracker.ack_many([k(3), k(2)]) == 2
    assert tracker.checkpoint == k(3) and tracker._nodes() == []
