"""What every test shares: the one fake clock.

``tests/`` is on ``sys.path`` (pytest puts the root conftest's folder there), so any
test imports it as ``from kit import FakeClock``; ``tests/conftest.py`` gives a fresh
one per test as the ``fake_clock`` fixture.
"""

from __future__ import annotations


class FakeClock:
    """Seconds that move only when the test moves them: :meth:`advance`, or :meth:`sleep`
    (which also records each wait in ``slept``). Call it as ``time.monotonic``; ``now`` may
    be set directly. ``sleep_cost`` is added to each sleep: the time a call around it took.
    """

    def __init__(self, now: float = 1000.0, *, sleep_cost: float = 0.0) -> None:
        self.now = now
        self.sleep_cost = sleep_cost
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds + self.sleep_cost
