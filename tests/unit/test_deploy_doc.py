"""docs/deploy.md shows each IAM policy of docs/iam/ as it is in its file (the file is what
the policy test checks against the calls each mode makes)."""

from __future__ import annotations

import json
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def shown_policies(doc: str) -> dict[str, str]:
    """``{file name: the json block after the paragraph that links it}``."""
    found = re.findall(r"\]\(iam/([\w.-]+\.json)\):\n\n```json\n(.*?)^```$", doc, re.M | re.S)
    return dict(found)


def test_every_policy_file_is_shown_in_the_deploy_guide_as_it_is() -> None:
    files = {p.name: p.read_text() for p in (DOCS / "iam").glob("*.json")}
    shown = shown_policies((DOCS / "deploy.md").read_text())
    assert sorted(shown) == sorted(files)
    for name, text in files.items():
        assert shown[name] == text, name
        assert json.loads(text)["Version"] == "2012-10-17"
