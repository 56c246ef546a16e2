"""Stateful property test: the XOR acker against a model holding every outstanding id.

Each root is a tree of random fan-out.  The model keeps the full set of tuple
ids created and not yet acked; a root is complete when that set is empty and
its init has arrived.  Inits may be held back so updates and fails overtake
them (Storm's ordering); bolts keep processing tuples of failed and timed-out
trees (late updates); the clock moves and expiries run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tracker import Acker, AckerEvent, AckerEventKind

UNSEEN, EARLY, OPEN, FINISHED, LOST = "unseen", "early", "open", "finished", "lost"


@dataclass
class Tree:
    root: int
    owner: str
    ack_val: int
    outstanding: set[int]
    state: str = UNSEEN  # what the ledger should know about this root
    init_sent: bool = False
    failed_early: bool = False
    seen_at: float = 0.0  # when the ledger first heard of it (the timeout's start)
    kids: list[int] = field(default_factory=list)


class AckerMachine(RuleBasedStateMachine):
    acker: Acker

    @initialize(seed=st.integers(0, 2**32), timeout=st.sampled_from([None, 3.0]))
    def setup(self, seed: int, timeout: float | None) -> None:
        self.acker = Acker(timeout=timeout, rng=random.Random(seed))
        self.timeout = timeout
        self.trees: list[Tree] = []
        self.now = 0.0
        self.counts: dict[str, int] = {}

    def count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def new_ids(self, n: int) -> list[int]:
        return [self.acker.new_id() for _ in range(n)]

    def pick(self, choice: int, *states: str) -> Tree | None:
        trees = [t for t in self.trees if t.state in states]
        return trees[choice % len(trees)] if trees else None

    def finish(self, tree: Tree, kind: AckerEventKind) -> AckerEvent:
        tree.state = FINISHED
        self.count(kind.value)
        return AckerEvent(tree.root, tree.owner, kind)

    # ------------------------------------------------------------------ rules

    @rule(fan_out=st.integers(0, 3), hold_init=st.booleans())
    def spout_emits(self, fan_out: int, hold_init: bool) -> None:
        root = self.acker.new_id()
        kids = self.new_ids(fan_out)
        ack_val = 0
        for kid in kids:
            ack_val ^= kid
        tree = Tree(root, f"owner-{len(self.trees)}", ack_val, set(kids), kids=kids)
        self.trees.append(tree)
        if not hold_init:
            self.send_init(tree)

    def send_init(self, tree: Tree) -> None:
        event = self.acker.init(tree.root, tree.ack_val, tree.owner, self.now)
        tree.init_sent = True
        if tree.state == FINISHED:
            self.count("duplicate_inits")
            assert event is None
            return
        self.count("inits")
        if tree.state == UNSEEN:
            tree.seen_at = self.now
        if tree.state == EARLY and tree.failed_early:
            assert event == self.finish(tree, AckerEventKind.FAILED)
        elif not tree.outstanding:
            assert event == self.finish(tree, AckerEventKind.COMPLETE)
        else:
            tree.state = OPEN
            tree.seen_at = self.now
            assert event is None

    @rule(choice=st.integers(0, 10**6))
    def deliver_held_init(self, choice: int) -> None:
        held = [t for t in self.trees if not t.init_sent and t.state in (UNSEEN, EARLY)]
        if held:
            self.send_init(held[choice % len(held)])

    @rule(choice=st.integers(0, 10**6))
    def duplicate_init(self, choice: int) -> None:
        tree = self.pick(choice, OPEN, FINISHED)
        if tree is None:
            return
        assert self.acker.init(tree.root, tree.ack_val, tree.owner, self.now) is None
        self.count("duplicate_inits")

    @rule(choice=st.integers(0, 10**6), fan_out=st.integers(0, 3))
    def bolt_acks(self, choice: int, fan_out: int) -> None:
        """A bolt processes one outstanding tuple: emits children anchored to it, acks it."""
        trees = [t for t in self.trees if t.outstanding and t.state != LOST]
        if not trees:
            return
        tree = trees[choice % len(trees)]
        tuple_id = sorted(tree.outstanding)[choice % len(tree.outstanding)]
        kids = self.new_ids(fan_out)
        xor_val = tuple_id
        for kid in kids:
            xor_val ^= kid
        tree.outstanding.discard(tuple_id)
        tree.outstanding.update(kids)
        event = self.acker.update(tree.root, xor_val, self.now)
        self.count("updates")
        if tree.state == FINISHED:
            self.count("unknown_updates")
            assert event is None
        elif tree.state == UNSEEN:
            tree.state = EARLY
            tree.seen_at = self.now
            self.count("early_updates")
            assert event is None
        elif tree.state == OPEN and not tree.outstanding:
            assert event == self.finish(tree, AckerEventKind.COMPLETE)
        else:
            assert event is None

    @rule(choice=st.integers(0, 10**6))
    def bolt_fails(self, choice: int) -> None:
        tree = self.pick(choice, UNSEEN, EARLY, OPEN, FINISHED)
        if tree is None:
            return
        event = self.acker.fail(tree.root, self.now)
        if tree.state == OPEN:
            assert event == self.finish(tree, AckerEventKind.FAILED)
            return
        assert event is None
        if tree.state == FINISHED:
            self.count("unknown_fails")
            return
        if tree.state == UNSEEN:
            tree.state = EARLY
            tree.seen_at = self.now
            self.count("early_updates")
        tree.failed_early = True

    @rule(step=st.sampled_from([0.0, 0.5, 1.0, 2.5, 4.0]))
    def tick(self, step: float) -> None:
        self.now += step

    @rule()
    def expire(self) -> None:
        events = self.acker.expire(self.now)
        expected = []
        if self.timeout is not None:
            for tree in self.trees:
                if tree.state in (EARLY, OPEN) and tree.seen_at + self.timeout < self.now:
                    if tree.state == OPEN:
                        expected.append(self.finish(tree, AckerEventKind.TIMED_OUT))
                    else:
                        tree.state = LOST  # nobody to tell: dropped
                        self.count("orphans_expired")
        assert sorted(events, key=repr) == sorted(expected, key=repr)

    # ------------------------------------------------------------- invariants

    @invariant()
    def ledger_matches(self) -> None:
        live = {t.root for t in self.trees if t.state in (EARLY, OPEN)}
        assert len(self.acker) == len(live)
        for tree in self.trees:
            assert self.acker.is_open(tree.root) == (tree.root in live)
            if tree.state == OPEN:
                expected = 0
                for tuple_id in tree.outstanding:
                    expected ^= tuple_id
                assert self.acker.ack_val(tree.root) == expected != 0

    @invariant()
    def counters_match(self) -> None:
        stats = self.acker.stats
        for name in (
            "inits",
            "updates",
            "complete",
            "failed",
            "timed_out",
            "early_updates",
            "unknown_updates",
            "unknown_fails",
            "duplicate_inits",
            "orphans_expired",
        ):
            attr = "completed" if name == "complete" else name
            assert getattr(stats, attr) == self.counts.get(name, 0), name


AckerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
test_acker_against_model = AckerMachine.TestCase
