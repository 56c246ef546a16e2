"""The configuration, :class:`SpoutConfig`, in modules by job.

``model``: the dataclass, its field docs, values turned into the fields' types; ``checks``:
the checks on values; ``load``: a TOML file, the environment and command-line flags
(``load_config``, ``config_from_args``, ``to_toml``); ``values``: shared constants and enums.
The package hands on the names that callers import from ``kinesis_spout.config``.
"""

from __future__ import annotations

from kinesis_spout.config.fielddocs import FIELD_DOCS
from kinesis_spout.config.model import FIELD_NAMES, SpoutConfig, coerce_values, is_field
from kinesis_spout.config.values import (
    CONSUMER_NAME,
    CONSUMER_NAME_RULE,
    CONSUMERS,
    DEAD_LETTER_REASONS,
    ENV_PREFIX,
    MAX_RECORDS_PER_CALL,
    READ_ON,
    InitialPosition,
)

__all__ = [
    "CONSUMER_NAME",
    "CONSUMER_NAME_RULE",
    "CONSUMERS",
    "DEAD_LETTER_REASONS",
    "ENV_PREFIX",
    "FIELD_DOCS",
    "FIELD_NAMES",
    "MAX_RECORDS_PER_CALL",
    "READ_ON",
    "InitialPosition",
    "SpoutConfig",
    "coerce_values",
    "is_field",
]
