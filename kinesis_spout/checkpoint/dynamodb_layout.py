"""The pure parts of the DynamoDB store: its URL and where each item lives.

One table (``dynamodb://TABLE``) holds every item of every job, keyed by two strings,
``pk`` (partition key) and ``sk`` (sort key), so an operator can read it with the AWS
CLI (docs/checkpoints.md)::

    pk                                   sk                         attributes
    <job>                                @job-lease                 owner, holder, lease_counter,
                                                                    expires_at, lease_seconds
    <job>/<stream>                       <shardId>                  checkpoint, version
    <job>/<stream>                       @identity                  identity, version
    <job>/<stream>/@retired/<identity>   <shardId>                  checkpoint, version
    <job>/<stream>/@batches[/run-<run>]  <batch, 12 digits>/<shard> end
    <job>/<stream>/@batches[/run-<run>]  @floor                     floor

``checkpoint`` is the JSON object of :mod:`~kinesis_spout.checkpoint.codec` (the other
stores' too), ``end`` a batch-end record's (:mod:`~kinesis_spout.checkpoint.batch_ends`).
Job and stream names hold no ``/`` and start with no ``@``, shard ids never start with
``@``: an ``@`` item never collides with a shard's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl

from kinesis_spout.checkpoint.batch_ends import run_dir
from kinesis_spout.errors import ConfigError

SCHEME = "dynamodb://"
DEFAULT_LEASE_SECONDS = 10.0
"""How long the job lease lasts unless renewed (ZooKeeper's default session timeout)."""
LEASE_SK = "@job-lease"
IDENTITY_SK = "@identity"
FLOOR_SK = "@floor"
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


def check_name(field: str, value: str) -> str:
    """``value`` if it can be part of a key (no ``/``, no leading ``@``), else
    :class:`ConfigError` naming ``field``."""
    if not value or "/" in value or value.startswith("@") or value in (".", ".."):
        raise ConfigError(field, value, "a non-empty name without '/' that does not start with '@'")
    return value


@dataclass(frozen=True, slots=True)
class JobKeys:
    """The keys of one job's items (see the module docstring)."""

    job: str

    def __post_init__(self) -> None:
        check_name("job_name", self.job)

    def lease(self) -> dict[str, str]:
        return {"pk": self.job, "sk": LEASE_SK}

    def stream(self, stream: str) -> str:
        """The partition of ``stream``'s checkpoints and identity."""
        return f"{self.job}/{check_name('stream_name', stream)}"

    def checkpoint(self, stream: str, shard: str) -> dict[str, str]:
        return {"pk": self.stream(stream), "sk": check_name("shard_id", shard)}

    def identity(self, stream: str) -> dict[str, str]:
        return {"pk": self.stream(stream), "sk": IDENTITY_SK}

    def retired(self, stream: str, identity: str) -> str:
        """The partition a recreated stream's old checkpoints are moved to."""
        stamp = "".join(c if c.isalnum() else "-" for c in identity)
        return f"{self.stream(stream)}/@retired/{stamp}"

    def batches(self, stream: str, run: str) -> str:
        """The partition of ``run``'s batch-end records (``""``: an earlier release's)."""
        base = f"{self.stream(stream)}/@batches"
        return f"{base}/{run_dir(run)}" if run else base


def batch_sk(batch: int, shard: str) -> str:
    """A batch-end record's sort key: batches sort by number (12 digits)."""
    return f"{batch:012d}/{shard}"


def item_where(table: str, key: dict[str, str]) -> str:
    """``dynamodb://TABLE/<pk>/<sk>``: an item, as errors name it."""
    return f"{SCHEME}{table}/{key['pk']}/{key['sk']}"
