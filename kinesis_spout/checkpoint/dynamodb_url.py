"""A ``dynamodb://TABLE[?lease_seconds=N]`` store URL, parsed and checked.

Apart from the rest of the store so that the configuration's checks can parse it
without importing the store (which imports the records, which import the configuration).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl

from kinesis_spout.errors import ConfigError

SCHEME = "dynamodb://"
DEFAULT_LEASE_SECONDS = 10.0
"""How long the job lease lasts unless renewed (ZooKeeper's default session timeout)."""
_TABLE = re.compile(r"^[A-Za-z0-9_.\-]{3,255}$")
_FORM = "dynamodb://TABLE[?lease_seconds=N], e.g. dynamodb://kinesis-spout"


@dataclass(frozen=True, slots=True)
class DynamoUrl:
    """A parsed ``dynamodb://TABLE[?lease_seconds=N]`` URL."""

    table: str
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    """The job lease's length: a holder that has not renewed it for this long has lost it."""

    @classmethod
    def parse(cls, url: str) -> DynamoUrl:
        """Parse and validate; :class:`ConfigError` names the URL and what is wrong."""
        if not url.startswith(SCHEME):
            raise ConfigError("checkpoint_store", url, _FORM)
        table, _, query = url[len(SCHEME) :].partition("?")
        if not _TABLE.match(table):
            raise ConfigError(
                "checkpoint_store",
                url,
                f"a table name of 3 to 255 letters, digits, '_', '-' or '.': {_FORM}",
            )
        lease = DEFAULT_LEASE_SECONDS
        try:
            params = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
        except ValueError:
            raise ConfigError("checkpoint_store", url, _FORM) from None
        unknown = sorted(set(params) - {"lease_seconds"})
        if unknown:
            raise ConfigError("checkpoint_store", url, f"no parameter {unknown[0]!r}: {_FORM}")
        if "lease_seconds" in params:
            try:
                lease = float(params["lease_seconds"])
            except ValueError:
                lease = -1.0
            if not 1.0 <= lease <= 3600.0:
                raise ConfigError(
                    "checkpoint_store", url, "lease_seconds: a number of seconds from 1 to 3600"
                )
        return cls(table, lease)

    def __str__(self) -> str:
        if self.lease_seconds == DEFAULT_LEASE_SECONDS:
            return f"{SCHEME}{self.table}"
        return f"{SCHEME}{self.table}?lease_seconds={self.lease_seconds:g}"
