"""Turning TOML, environment and CLI values into a field's type (config/coerce.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kinesis_spout.config.coerce import allowed_text, to_type
from kinesis_spout.config.values import InitialPosition


@pytest.mark.parametrize(
    ("typ", "value", "expected"),
    [
        (bool, "Yes", True),
        (bool, "off", False),
        (bool, True, True),
        (int, "42", 42),
        (int, 3.0, 3),
        (float, "0.5", 0.5),
        (float, 2, 2.0),
        (str, "a", "a"),
        (InitialPosition, "latest", InitialPosition.LATEST),
        (datetime, "2026-01-31T12:00:00", datetime(2026, 1, 31, 12, tzinfo=UTC)),
    ],
)
def test_a_value_becomes_the_type(typ: type, value: Any, expected: Any) -> None:
    got = to_type(typ, value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    ("typ", "value"),
    [
        (bool, "maybe"),
        (bool, 1),
        (int, 1.5),
        (int, True),
        (int, "x"),
        (float, False),
        (str, 3),
        (str, ["a", "b"]),  # a list only where the field takes one
        (InitialPosition, "SOMEWHERE"),
        (datetime, "yesterday"),
    ],
)
def test_a_value_that_is_not_the_type_is_refused(typ: type, value: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        to_type(typ, value)


def test_a_list_for_a_string_field_that_takes_one_is_joined() -> None:
    assert to_type(str, ["exhausted", "expired"], join_list=True) == "exhausted,expired"


def test_the_allowed_values_are_named() -> None:
    assert allowed_text(InitialPosition) == "one of TRIM_HORIZON, LATEST, AT_TIMESTAMP"
    assert allowed_text(bool) == "true or false"
