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
    """The ACTIVE consumer ``name`` of the stream, registered if absent."""
    backoff = backoff or ExponentialBackoff(0.25, cap=5.0)
    deadline = clock() + timeout
    attempt = 0
    registered = False
    while True:
        attempt += 1
        try:
            consumer = fanout.describe_consumer(name)
            if consumer is None:
                consumer = fanout.register_consumer(name)
                registered = True
                log.info("registered consumer %s of stream %s", name, fanout.stream_name)
            if consumer.status == "ACTIVE":
                log.info("consumer %s of stream %s is ACTIVE: %s", name, fanout.stream_name,
                         consumer.arn)  # fmt: skip
                return consumer
            state = consumer.status
        except (ResourceInUseError, ThrottledError) as exc:  # a racing registration, a limit
            state = str(exc)
        if clock() >= deadline:
            raise ConsumerNotReadyError(
                f"consumer {name!r} of stream {fanout.stream_name!r} is not ACTIVE after "
                f"{timeout:.0f}s (last seen: {state}{', registered by us' if registered else ''})"
            )
        log.debug("consumer %s: %s; waiting", name, state)
        sleep(min(backoff.delay(attempt), max(0.0, deadline - clock())))


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
