""":func:`freeze_imports`: what is alive is frozen once modules were imported since the
last freeze, and only then."""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kinesis_spout.spark.worker_heap import freeze_imports


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_a_freeze_follows_an_import_and_only_an_import(
    unfrozen: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    freeze_imports()  # what this process imported before the test
    frozen = gc.get_freeze_count()
    assert frozen > 0
    assert not freeze_imports() and gc.get_freeze_count() == frozen

    (tmp_path / "heap_probe_module.py").write_text("TABLES = [[i] for i in range(1000)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "heap_probe_module", raising=False)
    importlib.import_module("heap_probe_module")

    assert freeze_imports()
    assert gc.get_freeze_count() >= frozen + 1000  # the module's lists among them
    assert not freeze_imports()
