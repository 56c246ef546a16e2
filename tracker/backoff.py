"""Retry delays: small, pure, deterministic objects (no clock, no sleep).

``delay(attempt)`` is how long to wait before the next try after the
``attempt``-th failed try, counting from 1.  The in-flight tracker calls it with
the number of deliveries so far, so ``delay(1)`` spaces the first retry.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Backoff", "ExponentialBackoff", "JitteredBackoff", "NoBackoff"]


class Backoff(Protocol):
    """A retry delay policy."""

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th failure (``attempt >= 1``)."""
        ...


def _check_attempt(attempt: int) -> None:
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt!r}")


def _check_number(name: str, value: float, low: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < low
    ):
        raise ValueError(f"{name} must be a finite number >= {low}, got {value!r}")


@dataclass(frozen=True, slots=True)
class NoBackoff:
    """Retry at once: ``delay`` is always 0."""

    def delay(self, attempt: int) -> float:
        _check_attempt(attempt)
        return 0.0


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    """``min(cap, base * factor ** (attempt - 1))``: base, base*factor, ... up to cap.

    >>> [ExponentialBackoff(0.5, cap=3.0).delay(n) for n in (1, 2, 3, 4)]
    [0.5, 1.0, 2.0, 3.0]
    """

    base: float
    factor: float = 2.0
    cap: float = 60.0

    def __post_init__(self) -> None:
        _check_number("base", self.base, 0.0)
        _check_number("factor", self.factor, 1.0)
        _check_number("cap", self.cap, 0.0)

    def delay(self, attempt: int) -> float:
        _check_attempt(attempt)
        try:
            value = self.base * self.factor ** (attempt - 1)
        except OverflowError:
            return float(self.cap)
        return float(min(self.cap, value))


@dataclass(frozen=True, slots=True)
class JitteredBackoff:
    """Another policy's delay, shortened by a random fraction drawn from ``rng``.

    The result lies in ``(d * (1 - ratio), d]`` where ``d = inner.delay(attempt)``:
    ``ratio=1`` is "full jitter", ``ratio=0.5`` "equal jitter".  The caller owns
    ``rng`` (seed it in tests), so the sequence of delays is reproducible.
    """

    inner: Backoff
    rng: random.Random = field(compare=False)
    ratio: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.rng, random.Random):
            raise ValueError(f"rng must be a random.Random, got {self.rng!r}")
        _check_number("ratio", self.ratio, 0.0)
        if self.ratio > 1.0:
            raise ValueError(f"ratio must be a finite number in [0, 1], got {self.ratio!r}")

    def delay(self, attempt: int) -> float:
        full = self.inner.delay(attempt)
        return full - self.ratio * full * self.rng.random()
