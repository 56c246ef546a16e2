"""The one retry loop: a call tried again after a backoff while it fails in a way that may pass.

:func:`retrying` calls ``fn()`` again after ``backoff.delay(n)`` while it raises an error
the caller's ``retriable`` test accepts (by default a retriable
:class:`~kinesis_spout.errors.KinesisSpoutError`) or returns a result its ``again`` test
asks to try again (a throttled read, a put with refused records), until ``attempts``
tries or ``deadline``; then the last error is raised, or the last result returned as it
is (what a partial try got is the caller's to keep). Any other error is raised after one
try. Each retry is one log line on the caller's logger, ``"<what>: <error or reason>;
retry <n> in <delay>s"``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from kinesis_spout.errors import KinesisSpoutError
from tracker import Backoff

log = logging.getLogger(__name__)

T = TypeVar("T")


def is_retriable(exc: Exception) -> bool:
    """The default ``retriable`` test: a :class:`KinesisSpoutError` whose ``retriable``
    is true (throttled, dropped, a store away, ...)."""
    return isinstance(exc, KinesisSpoutError) and exc.retriable


def never(exc: Exception) -> bool:
    """A ``retriable`` test that retries no error (only ``again`` asks for a retry)."""
    return False


def retrying(
    what: str,
    fn: Callable[[], T],
    *,
    backoff: Backoff,
    attempts: int | None = None,
    deadline: float | None = None,
    retriable: Callable[[Exception], bool] = is_retriable,
    again: Callable[[T], object | None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    level: int = logging.INFO,
    logger: logging.Logger = log,
) -> T:
    """``fn()``, tried again after a backoff while it fails retriably (see the module doc).

    ``attempts``: most calls in all; ``deadline``: no retry once ``clock()`` reached
    it, and no wait goes past it (at least one of the two is required). ``retriable``:
    whether an error ``fn`` raised may pass on another try (other errors are raised at
    once). ``again``: given what ``fn`` returned, None to return it, or a reason
    (logged) to try again; on the last try the result is returned whatever it says.
    ``what`` names the call in the log line of each retry (at ``level`` on ``logger``).
    """
    if attempts is None and deadline is None:
        raise ValueError("retrying needs attempts or a deadline")
    if attempts is not None and attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts!r}")
    tries = 0
    while True:
        tries += 1
        try:
            result = fn()
        except Exception as exc:  # the caller's test decides which errors pass
            if not retriable(exc) or _spent(tries, attempts, deadline, clock):
                raise
            reason: object = exc
        else:
            reason = None if again is None else again(result)
            if reason is None or _spent(tries, attempts, deadline, clock):
                return result
        delay = backoff.delay(tries)
        if deadline is not None:
            delay = min(delay, max(0.0, deadline - clock()))
        logger.log(level, "%s: %s; retry %d in %.2fs", what, reason, tries, delay)
        sleep(delay)


def _spent(
    tries: int, attempts: int | None, deadline: float | None, clock: Callable[[], float]
) -> bool:
    """No try is left: ``attempts`` made, or ``deadline`` reached."""
    if attempts is not None and tries >= attempts:
        return True
    return deadline is not None and clock() >= deadline
