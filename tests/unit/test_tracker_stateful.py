"""Stateful property test: the tracker against a deliberately simple reference model.

The model is a plain list of emitted keys plus a dict of states, with every
answer computed the slow, obvious way.  Hypothesis interleaves emits (new,
duplicate, re-read, retries), acks, fails, bulk acks and fails, retries handed
out, clock moves and expiries, and after every step checks the checkpoint, the
retry order, the dead-lettered set, the in-flight count and the counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from tracker import (
    Backoff,
    ExponentialBackoff,
    FailAction,
    FailOutcome,
    InflightRecordTracker,
    NoBackoff,
    RetryItem,
    SequenceKey,
)

IN_FLIGHT, AWAITING, ACKED, GIVEN_UP = "in_flight", "awaiting", "acked", "given_up"
# Given up, its dead letter not confirmed yet: still pending (blocks the checkpoint).
GIVING_UP = "giving_up"
NOT_DONE = (IN_FLIGHT, AWAITING, GIVING_UP)


@dataclass
class Model:
    retry_limit: int
    timeout: float | None
    backoff: Backoff
    start: SequenceKey | None = None  # the restored checkpoint, if any
    order: list[SequenceKey] = field(default_factory=list)
    state: dict[SequenceKey, str] = field(default_factory=dict)
    deliveries: dict[SequenceKey, int] = field(default_factory=dict)
    record: dict[SequenceKey, str | None] = field(default_factory=dict)
    due: dict[SequenceKey, float] = field(default_factory=dict)
    delivered: dict[SequenceKey, tuple[float, int]] = field(default_factory=dict)
    dead_letters: list[SequenceKey] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    delivery_count: int = 0

    def count(self, name: str) -> None:
        self.counters[name] = self.counters.get(name, 0) + 1

    @property
    def latest(self) -> SequenceKey | None:
        return self.order[-1] if self.order else self.start

    def checkpoint(self) -> SequenceKey | None:
        last = self.start
        for key in self.order:
            if self.state[key] in NOT_DONE:
                break
            last = key
        return last

    def pending(self) -> list[SequenceKey]:
        return [key for key in self.order if self.state[key] in NOT_DONE]

    def nodes(self) -> list[tuple[SequenceKey, bool]]:
        """The tracker's list, derived: every pending key, and for each run of done keys
        after the first pending one, the run's last key (its representative)."""
        out: list[tuple[SequenceKey, bool]] = []
        for key in self.order:
            done = self.state[key] not in NOT_DONE
            if not done:
                out.append((key, False))
            elif out and out[-1][1]:
                out[-1] = (key, True)
            elif out:
                out.append((key, True))
        return out

    def retry_queue(self) -> list[tuple[float, SequenceKey]]:
        return sorted((self.due[key], key) for key in self.order if self.state[key] == AWAITING)

    def deliver(self, key: SequenceKey, now: float) -> None:
        self.delivery_count += 1
        self.delivered[key] = (now, self.delivery_count)
        self.deliveries[key] = self.deliveries.get(key, 0) + 1
        self.state[key] = IN_FLIGHT

    def emit(self, key: SequenceKey, record: str | None, now: float) -> bool:
        state = self.state.get(key)
        if state is None and (self.latest is None or key > self.latest):
            self.order.append(key)
            self.record[key] = record
            self.deliver(key, now)
            self.count("emitted")
            return True
        if state == AWAITING:
            if record is not None:
                self.record[key] = record
            del self.due[key]
            self.deliver(key, now)
            self.count("retried")
            return True
        self.count("ignored_emits")
        return False

    def ack(self, key: SequenceKey) -> bool:
        state = self.state.get(key)
        if state == GIVING_UP:  # only its dead letter makes it done
            self.count("duplicate_acks")
            return False
        if state in NOT_DONE:
            if state == AWAITING:
                del self.due[key]
                self.count("late_acks")
            self.state[key] = ACKED
            self.count("acked")
            return True
        if self.latest is not None and key <= self.latest:
            self.count("duplicate_acks")
        else:
            self.count("unknown_acks")
        return False

    def fail(self, key: SequenceKey, now: float, error: str | None) -> FailOutcome[str]:
        state = self.state.get(key)
        if state != IN_FLIGHT:
            self.count("ignored_fails")
            attempts = self.deliveries[key] if state in (AWAITING, GIVING_UP) else 0
            return FailOutcome(FailAction.IGNORED, key, None, attempts, None, error)
        attempts = self.deliveries[key]
        if attempts > self.retry_limit:
            self.state[key] = GIVING_UP
            self.dead_letters.append(key)
            self.count("given_up")
            return FailOutcome(FailAction.GIVEN_UP, key, self.record[key], attempts, None, error)
        self.state[key] = AWAITING
        self.due[key] = now + self.backoff.delay(attempts)
        return FailOutcome(FailAction.RETRY, key, self.record[key], attempts, self.due[key], error)

    def dead_lettered(self, key: SequenceKey) -> bool:
        if self.state.get(key) != GIVING_UP:
            self.count("ignored_fails")
            return False
        self.state[key] = GIVEN_UP
        return True

    def next_retry(self, now: float) -> RetryItem[str] | None:
        queue = self.retry_queue()
        if not queue or queue[0][0] > now:
            return None
        key = queue[0][1]
        return RetryItem(key, self.record[key], self.deliveries[key] + 1)

    def expire(self, now: float) -> list[FailOutcome[str]]:
        if self.timeout is None:
            return []
        timeout = self.timeout
        due = sorted(
            (self.delivered[key][1], key)
            for key in self.order
            if self.state[key] == IN_FLIGHT and self.delivered[key][0] + timeout < now
        )
        error = f"message timeout: not acked within {timeout:g} s"
        out = []
        for _, key in due:
            self.count("expired")
            out.append(self.fail(key, now, error))
        return out


key_choice = st.integers(min_value=0, max_value=10**6)


class TrackerMachine(RuleBasedStateMachine):
    tracker: InflightRecordTracker[str]
    model: Model

    @initialize(
        retry_limit=st.integers(0, 3),
        timeout=st.sampled_from([None, 2.0, 5.0]),
        exponential=st.booleans(),
        max_in_flight=st.sampled_from([None, 1, 4]),
        resume_after=st.sampled_from([None, SequenceKey(10**40 - 2, 5)]),
    )
    def setup(
        self,
        retry_limit: int,
        timeout: float | None,
        exponential: bool,
        max_in_flight: int | None,
        resume_after: SequenceKey | None,
    ) -> None:
        backoff: Backoff = ExponentialBackoff(1.0, 2.0, 4.0) if exponential else NoBackoff()
        self.tracker = InflightRecordTracker(
            retry_limit, max_in_flight, timeout, backoff, resume_after=resume_after
        )
        self.model = Model(retry_limit, timeout, backoff, start=resume_after)
        self.max_in_flight = max_in_flight
        self.now = 0.0
        self.last_checkpoint: SequenceKey | None = None

    # ---------------------------------------------------------------- helpers

    def pick(self, choice: int) -> SequenceKey:
        """Mostly a pending key; else any emitted key, or one never emitted (gap or future)."""
        order = self.model.order
        pending = self.model.pending()
        if pending and choice % 8 < 5:
            return pending[(choice // 8) % len(pending)]
        if order and choice % 8 < 7:
            return order[choice % len(order)]
        latest = self.model.latest
        base = latest.sequence if latest is not None else 0
        return SequenceKey(max(0, base + choice % 7 - 3), choice % 3)

    # ------------------------------------------------------------------ rules

    @rule(gap=st.integers(0, 3), sub=st.integers(0, 2), with_record=st.booleans())
    def emit_new(self, gap: int, sub: int, with_record: bool) -> None:
        latest = self.model.latest
        if latest is None:
            key = SequenceKey(10**40 + gap, sub)
        elif gap == 0:
            key = SequenceKey(latest.sequence, latest.sub_sequence + 1 + sub)
        else:
            key = SequenceKey(latest.sequence + gap, sub)
        record = f"r{key}" if with_record else None
        assert self.tracker.emitted(key, record, self.now) is True
        assert self.model.emit(key, record, self.now) is True

    @rule(choice=key_choice, with_record=st.booleans())
    def emit_again(self, choice: int, with_record: bool) -> None:
        """A re-read, a duplicate delivery, or a retry handed out early."""
        key = self.pick(choice)
        if self.model.latest is not None and key > self.model.latest:
            return  # that would be a new record
        record = f"r{key}'" if with_record else None
        assert self.tracker.emitted(key, record, self.now) == self.model.emit(key, record, self.now)

    @rule(choice=key_choice)
    def ack(self, choice: int) -> None:
        key = self.pick(choice)
        assert self.tracker.ack(key) == self.model.ack(key)

    @rule(choices=st.lists(key_choice, max_size=8))
    def ack_many(self, choices: list[int]) -> None:
        keys = [self.pick(c) for c in choices]
        expected = sum(self.model.ack(key) for key in keys)
        assert self.tracker.ack_many(keys) == expected

    @rule(choice=key_choice, error=st.sampled_from([None, "boom"]))
    def fail(self, choice: int, error: str | None) -> None:
        key = self.pick(choice)
        assert self.tracker.fail(key, self.now, error) == self.model.fail(key, self.now, error)

    @rule(choices=st.lists(key_choice, max_size=5))
    def fail_many(self, choices: list[int]) -> None:
        items = [(self.pick(c), f"e{c}") for c in choices]
        expected = [self.model.fail(key, self.now, error) for key, error in items]
        assert self.tracker.fail_many(items, self.now) == expected

    @rule(choice=key_choice)
    def dead_letter_written(self, choice: int) -> None:
        key = self.pick(choice)
        assert self.tracker.dead_lettered(key) == self.model.dead_lettered(key)

    @precondition(lambda self: self.model.order)
    @rule()
    def every_dead_letter_written(self) -> None:
        keys = [key for key in self.model.order if self.model.state[key] == GIVING_UP]
        expected = sum(self.model.dead_lettered(key) for key in keys)
        assert self.tracker.dead_lettered_many(keys) == expected

    @rule(hand_out=st.booleans())
    def retry(self, hand_out: bool) -> None:
        item = self.tracker.next_retry(self.now)
        assert item == self.model.next_retry(self.now)
        if item is not None and hand_out:
            assert self.tracker.emitted(item.key, item.record, self.now)
            assert self.model.emit(item.key, item.record, self.now)

    @rule(step=st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 7.0]))
    def tick(self, step: float) -> None:
        self.now += step

    @rule()
    def expire(self) -> None:
        assert self.tracker.expire(self.now) == self.model.expire(self.now)

    @precondition(lambda self: self.model.order)
    @rule()
    def ack_everything_in_flight(self) -> None:
        keys = [key for key in self.model.pending() if self.model.state[key] == IN_FLIGHT]
        expected = sum(self.model.ack(key) for key in keys)
        assert self.tracker.ack_many(keys) == expected

    # ------------------------------------------------------------- invariants

    @invariant()
    def checkpoint_matches_and_never_decreases(self) -> None:
        checkpoint = self.tracker.checkpoint
        assert checkpoint == self.model.checkpoint()
        if self.last_checkpoint is not None:
            assert checkpoint is not None and checkpoint >= self.last_checkpoint
        self.last_checkpoint = checkpoint

    @invariant()
    def retry_order_matches(self) -> None:
        queue = self.model.retry_queue()
        assert self.tracker.next_retry_at() == (queue[0][0] if queue else None)
        assert self.tracker.next_retry(self.now) == self.model.next_retry(self.now)
        assert self.tracker.stats.pending_retries == len(queue)

    @invariant()
    def in_flight_and_pending_match(self) -> None:
        pending = self.model.pending()
        assert self.tracker.in_flight == len(pending)
        assert list(self.tracker.pending()) == pending
        if self.max_in_flight is not None:
            assert self.tracker.can_emit == (len(pending) < self.max_in_flight)

    @invariant()
    def dead_letters_match(self) -> None:
        states = self.model.state
        given_up = {key for key in self.model.order if states[key] in (GIVEN_UP, GIVING_UP)}
        assert given_up == set(self.model.dead_letters)
        assert self.tracker.stats.given_up == len(given_up)
        waiting = sum(1 for key in self.model.order if states[key] == GIVING_UP)
        assert self.tracker.stats.given_up_pending == waiting

    @invariant()
    def nodes_collapse(self) -> None:
        nodes = self.tracker._nodes()  # checks the map's layout too
        assert nodes == self.model.nodes()
        assert len(self.tracker) <= 3 * self.tracker.in_flight + 64

    @invariant()
    def counters_match(self) -> None:
        stats = self.tracker.stats
        c = self.model.counters
        for name in (
            "emitted",
            "acked",
            "retried",
            "duplicate_acks",
            "unknown_acks",
            "ignored_fails",
            "ignored_emits",
            "expired",
            "late_acks",
        ):
            assert getattr(stats, name) == c.get(name, 0), name


TrackerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=80, deadline=None)
test_tracker_against_model = TrackerMachine.TestCase
