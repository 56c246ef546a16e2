"""The README's configuration table names every :class:`SpoutConfig` field, and nothing else."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from kinesis_spout.config import SpoutConfig

README = Path(__file__).resolve().parents[2] / "README.md"


def table_keys(readme: str) -> set[str]:
    """The backticked names in the first column of the table under ``## Configuration``."""
    start = readme.index("\n## Configuration\n")
    end = readme.index("\n## ", start + 1)
    keys: set[str] = set()
    for line in readme[start:end].splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            keys.update(re.findall(r"`([a-z_]+)`", first))
    return keys


def test_every_config_field_is_in_the_readme_table() -> None:
    fields = {f.name for f in dataclasses.fields(SpoutConfig)}
    keys = table_keys(README.read_text())
    assert sorted(fields - keys) == [], "fields missing from the README's configuration table"
    assert sorted(keys - fields) == [], "keys in the README's table that are not fields"
