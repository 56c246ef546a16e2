"""The enhanced fan-out consumer of a reader: registered if absent, waited for until ACTIVE.

Consumer states (``ConsumerStatus``)::

    (absent) --RegisterStreamConsumer--> CREATING --(Kinesis)--> ACTIVE
    ACTIVE --DeregisterStreamConsumer--> DELETING --(Kinesis)--> (absent)

:func:`ensure_consumer` describes the consumer; registers it when absent (two
readers racing to register: the loser's ``ResourceInUseException`` means it exists,
and it describes again); waits while it is CREATING, or DELETING (then registers
it again), until ACTIVE or ``timeout``. Throttled calls are tried again after a
backoff. Only the start blocks like this.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kinesis_spout.errors import KinesisError, ResourceInUseError, ThrottledError
from kinesis_spout.kinesis.efo_api import Consumer, FanOutApi
from kinesis_spout.retrying import retrying
from tracker import Backoff, ExponentialBackoff

log = logging.getLogger(__name__)

#: Seconds to wait for a consumer to become ACTIVE (Kinesis takes a few seconds).
CONSUMER_TIMEOUT = 120.0


class ConsumerNotReadyError(KinesisError):
    """The consumer did not become ACTIVE in time."""


def ensure_consumer(
    fanout: FanOutApi,
    name: str,
    *,
    timeout: float = CONSUMER_TIMEOUT,
    backoff: Backoff | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Consumer:
    """The ACTIVE consumer ``name`` of the stream, registered if absent; waited for
    (described again after a backoff) while it is not ACTIVE or a call is refused as
    busy or throttled, until ``timeout``."""
    registered = False

    def described() -> Consumer:
        nonlocal registered
        consumer = fanout.describe_consumer(name)
        if consumer is None:
            consumer = fanout.register_consumer(name)
            registered = True
            log.info("registered consumer %s of stream %s", name, fanout.stream_name)
        return consumer

    def not_ready(state: str) -> ConsumerNotReadyError:
        return ConsumerNotReadyError(
            f"consumer {name!r} of stream {fanout.stream_name!r} is not ACTIVE after "
            f"{timeout:.0f}s (last seen: {state}{', registered by us' if registered else ''})"
        )

    try:
        consumer = retrying(
            f"consumer {name}",
            described,
            backoff=backoff or ExponentialBackoff(0.25, cap=5.0),
            deadline=clock() + timeout,
            retriable=_racing_or_throttled,
            again=_not_active,
            sleep=sleep,
            clock=clock,
            level=logging.DEBUG,
            logger=log,
        )
    except (ResourceInUseError, ThrottledError) as exc:
        raise not_ready(str(exc)) from exc
    if consumer.status != "ACTIVE":
        raise not_ready(consumer.status)
    log.info("consumer %s of stream %s is ACTIVE: %s", name, fanout.stream_name, consumer.arn)
    return consumer


def _racing_or_throttled(exc: Exception) -> bool:
    """A racing registration (the consumer exists now), or a limit."""
    return isinstance(exc, ResourceInUseError | ThrottledError)


def _not_active(consumer: Consumer) -> str | None:
    """A consumer's state while it is not ACTIVE yet (CREATING, DELETING)."""
    return None if consumer.status == "ACTIVE" else consumer.status


def deregister_consumer(fanout: FanOutApi, name: str) -> None:
    """Deregister ``name`` (logged; an absent one is fine, an error is logged, not raised:
    the reader is closing)."""
    try:
        gone = fanout.deregister_consumer(name)
    except KinesisError as exc:
        log.warning("could not deregister consumer %s of %s: %s", name, fanout.stream_name, exc)
        return
    if gone:
        log.info("deregistered consumer %s of stream %s", name, fanout.stream_name)
