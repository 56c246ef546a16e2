"""Fixtures of the reader tests (the shared servers are in ``tests/conftest.py``).

``clock_kinesis_mock`` is a kinesis-mock of its own whose clock a test can move
forward (see :class:`reader_helpers.ClockKinesisMock`): that is how a real
300-second iterator expiry happens in a test that lasts a second.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from reader_helpers import ClockKinesisMock


@pytest.fixture(scope="session")
def clock_kinesis_mock() -> Iterator[ClockKinesisMock]:
    with ClockKinesisMock() as server:
        yield server
