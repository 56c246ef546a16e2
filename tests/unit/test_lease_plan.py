"""The rebalance decision as a pure function (coordination/control.py)."""

from __future__ import annotations

import doctest

from kinesis_spout.coordination import control
from kinesis_spout.coordination.control import plan_leases
from kinesis_spout.coordination.leases import LeaseState

H, R, A, S = LeaseState.HELD, LeaseState.RELEASING, LeaseState.ACQUIRING, LeaseState.SUSPENDED


def test_every_transition_of_a_rebalance() -> None:
    states = {"held-kept": H, "held-lost": H, "acq-lost": A, "rel-back": R, "rel-gone": R}
    new, acquire, given_up = plan_leases(states, ["held-kept", "rel-back", "acq-new", "zz"])
    assert new == {"held-kept": H, "held-lost": R, "rel-back": H, "rel-gone": R}
    assert acquire == ["acq-new", "zz"]
    assert given_up == ["held-lost"]


def test_suspended_leases_are_left_to_the_session_logic() -> None:
    new, acquire, given_up = plan_leases({"a": S, "b": S}, ["a"])
    assert new == {"a": S, "b": S} and acquire == [] and given_up == []


def test_the_docstring_example_holds() -> None:
    assert doctest.testmod(control).failed == 0
