"""The pure parts of the DynamoDB store: where each item lives (its URL: :mod:`.dynamodb_url`).

One table (``dynamodb://TABLE``) holds every item of every job, keyed by two strings,
``pk`` and ``sk``, so an operator can read it with the AWS CLI: ``<job>`` / ``@job-lease``,
``<job>/<stream>`` / ``<shardId>`` and ``@identity``, ``<job>/<stream>/@retired/<identity>``
/ ``<shardId>``, ``<job>/<stream>/@batches[/run-<run>]`` / ``<batch>/<shard>`` and
``@floor``. Job and stream names hold no ``/`` and start with no ``@``, and shard ids never
start with ``@``, so an ``@`` item never collides with a shard's. The table with each
item's attributes: docs/checkpoints.md ("The DynamoDB store").
"""

from __future__ import annotations

from dataclasses import dataclass

from kinesis_spout.checkpoint.batch_ends import run_dir
from kinesis_spout.checkpoint.dynamodb_url import DEFAULT_LEASE_SECONDS, SCHEME, DynamoUrl
from kinesis_spout.errors import ConfigError

__all__ = ["DEFAULT_LEASE_SECONDS", "DynamoUrl", "JobKeys", "check_name", "item_where"]

LEASE_SK = "@job-lease"
IDENTITY_SK = "@identity"
FLOOR_SK = "@floor"


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
