""":func:`freeze_imports`: what is alive is frozen once modules were imported since the
last freeze, and only then. Checked in a fresh interpreter: a test process may hold
other tests' threads, whose tasks freeze too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import gc, importlib, json, sys
from kinesis_spout.spark.worker_heap import freeze_imports

seen = {"first": freeze_imports(), "frozen": gc.get_freeze_count()}
seen["again"] = freeze_imports()
seen["frozen_again"] = gc.get_freeze_count()
sys.path.insert(0, sys.argv[1])
importlib.import_module("heap_probe_module")
seen["after_import"] = freeze_imports()
seen["frozen_after_import"] = gc.get_freeze_count()
seen["once_more"] = freeze_imports()
print(json.dumps(seen))
"""


def test_a_freeze_follows_an_import_and_only_an_import(tmp_path: Path) -> None:
    (tmp_path / "heap_probe_module.py").write_text("TABLES = [[i] for i in range(1000)]\n")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])

    assert seen["first"] and seen["frozen"] > 0
    assert not seen["again"] and seen["frozen_again"] == seen["frozen"]
    assert seen["after_import"]
    assert seen["frozen_after_import"] >= seen["frozen"] + 1000  # the module's lists
    assert not seen["once_more"]
