"""What every test shares: the one fake clock and the one config builder.

``tests/`` is on ``sys.path`` (pytest puts the root conftest's folder there), so any
test imports them as ``from kit import FakeClock, spout_config``; ``tests/conftest.py``
gives a fresh clock per test as the ``fake_clock`` fixture. Fixtures that know a server
(the Spark tests' ``job_config``) fill in its endpoint and call :func:`spout_config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kinesis_spout.config import SpoutConfig

IDENTITY: dict[str, Any] = {
    "stream_name": "s",
    "job_name": "job",
    "checkpoint_store": "memory://",
    "dead_letter": "none",
}
"""Who reads what, and where its checkpoints and dead letters go: nowhere on disk."""

FAST: dict[str, Any] = {
    "empty_shard_backoff": 0.05,
    "throttle_backoff": 0.02,
    "throttle_backoff_max": 0.2,
}
"""Backoffs of fractions of a second: an idle shard is polled again, a throttled call
retried, soon. They change when a test's events happen, never which."""


def spout_config(*, under: Path | None = None, fast: bool = True, **overrides: Any) -> SpoutConfig:
    """A :class:`SpoutConfig` with test defaults, ``overrides`` winning (and validated).

    Stream ``s`` of job ``job``, checkpoints in memory, no dead letters; with ``under``
    (a test's ``tmp_path``): checkpoints in files under ``under/checkpoints`` and dead
    letters in ``under/dead-letter``. ``fast``: the :data:`FAST` backoffs; False keeps the
    library's own (unit tests with a fake clock written against them). ``streams`` given
    without ``stream_name``: the streams alone name what is read.
    """
    values: dict[str, Any] = dict(IDENTITY)
    if under is not None:
        values["checkpoint_store"] = f"file://{under / 'checkpoints'}"
        values["dead_letter"] = str(under / "dead-letter")
    if fast:
        values.update(FAST)
    if "streams" in overrides:
        del values["stream_name"]
    values.update(overrides)
    return SpoutConfig(**values)


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
