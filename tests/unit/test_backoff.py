"""Backoff policies: pure, deterministic, validated."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracker import Backoff, ExponentialBackoff, JitteredBackoff, NoBackoff


def test_no_backoff() -> None:
    assert [NoBackoff().delay(n) for n in (1, 2, 100)] == [0.0, 0.0, 0.0]


def test_exponential_backoff_doubles_up_to_the_cap() -> None:
    backoff = ExponentialBackoff(base=0.5, cap=3.0)
    assert [backoff.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert ExponentialBackoff(1.0, factor=3.0, cap=100.0).delay(3) == 9.0
    assert ExponentialBackoff(1.0, factor=1.0).delay(50) == 1.0


def test_exponential_backoff_does_not_overflow() -> None:
    assert ExponentialBackoff(base=1.0, cap=60.0).delay(10_000) == 60.0


@pytest.mark.parametrize("policy", [NoBackoff(), ExponentialBackoff(1.0)])
@pytest.mark.parametrize("attempt", [0, -1])
def test_attempt_counts_from_one(policy: Backoff, attempt: int) -> None:
    with pytest.raises(ValueError, match="attempt"):
        policy.delay(attempt)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"base": -1.0}, "base"),
        ({"base": float("nan")}, "base"),
        ({"base": "1"}, "base"),
        ({"base": 1.0, "factor": 0.5}, "factor"),
        ({"base": 1.0, "factor": float("inf")}, "factor"),
        ({"base": 1.0, "cap": -2.0}, "cap"),
        ({"base": True}, "base"),
    ],
)
def test_exponential_backoff_validates_naming_the_argument(
    kwargs: dict[str, object], name: str
) -> None:
    with pytest.raises(ValueError, match=name):
        ExponentialBackoff(**kwargs)  # type: ignore[arg-type]


@given(st.floats(0, 100), st.floats(1, 4), st.floats(0, 1000), st.integers(1, 200))
def test_exponential_backoff_is_monotonic_and_capped(
    base: float, factor: float, cap: float, attempt: int
) -> None:
    backoff = ExponentialBackoff(base, factor, cap)
    assert 0.0 <= backoff.delay(attempt) <= backoff.delay(attempt + 1) <= cap


def test_jittered_backoff_is_reproducible_with_a_seeded_rng() -> None:
    inner = ExponentialBackoff(base=1.0, cap=30.0)
    first = JitteredBackoff(inner, random.Random(42))
    second = JitteredBackoff(inner, random.Random(42))
    delays = [first.delay(n) for n in range(1, 10)]
    assert delays == [second.delay(n) for n in range(1, 10)]
    assert all(0.0 < d <= inner.delay(n) for n, d in enumerate(delays, start=1))
    assert len(set(delays)) == len(delays)


@given(st.integers(0, 2**32), st.floats(0, 1), st.integers(1, 30))
def test_jitter_stays_within_its_ratio(seed: int, ratio: float, attempt: int) -> None:
    inner = ExponentialBackoff(base=0.25, cap=20.0)
    full = inner.delay(attempt)
    delay = JitteredBackoff(inner, random.Random(seed), ratio).delay(attempt)
    assert full * (1 - ratio) - 1e-9 <= delay <= full


def test_zero_ratio_is_no_jitter() -> None:
    inner = ExponentialBackoff(base=2.0)
    assert JitteredBackoff(inner, random.Random(0), ratio=0.0).delay(3) == 8.0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"ratio": 1.5}, "ratio"), ({"ratio": -0.1}, "ratio"), ({"rng": 3}, "rng")],
)
def test_jittered_backoff_validates(kwargs: dict[str, object], name: str) -> None:
    args: dict[str, object] = {"inner": NoBackoff(), "rng": random.Random(0), **kwargs}
    with pytest.raises(ValueError, match=name):
        JitteredBackoff(**args)  # type: ignore[arg-type]
