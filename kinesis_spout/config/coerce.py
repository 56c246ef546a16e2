"""Turning a value from a TOML file, the environment or a CLI flag into a Python type.

The model (:mod:`kinesis_spout.config.model`) knows which type each field has; this
module knows how text and TOML values become those types (``"yes"`` a bool, an ISO
string a timezone-aware datetime, a position name an :class:`InitialPosition`) and how
to name the values a type allows in an error.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kinesis_spout.config.values import InitialPosition

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})


def to_type(typ: type, value: Any, *, join_list: bool = False) -> Any:
    """``value`` as a ``typ`` (bool, int, float, str, InitialPosition, datetime); raise
    ``ValueError`` or ``TypeError`` if it is not one. ``join_list``: a list or tuple
    given for a string is joined with commas."""
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in TRUE | FALSE:
            return value.lower() in TRUE
        raise ValueError(value)
    if typ is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(value)
        return int(value)
    if typ is float:
        if isinstance(value, bool):
            raise ValueError(value)
        return float(value)
    if typ is str:
        if isinstance(value, list | tuple) and join_list:
            value = ",".join(str(v) for v in value)
        if not isinstance(value, str):
            raise ValueError(value)
        return value
    if typ is InitialPosition:
        return value if isinstance(value, InitialPosition) else InitialPosition(str(value).upper())
    if typ is datetime:
        dt = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    return value


def allowed_text(typ: type) -> str:
    """What a value of ``typ`` may be, for an error message."""
    return {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "a string",
        InitialPosition: "one of " + ", ".join(p.value for p in InitialPosition),
        datetime: "an ISO 8601 timestamp such as 2026-01-31T12:00:00Z",
    }.get(typ, getattr(typ, "__name__", str(typ)))
