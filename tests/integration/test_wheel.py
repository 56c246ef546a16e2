"""The wheel ships the product and its small test harness, not the project's test kit.

The wheel is built from a copy of the sources (pip, no build isolation, no network), so a
change to ``[tool.setuptools.packages.find]`` that pulls ``devkit/`` in, or a product module
that imports it, fails here.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("kinesis_spout", "tracker")


def _copy_sources(dest: Path) -> None:
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    for name in (*PRODUCT, "devkit"):
        shutil.copytree(
            REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    src = tmp_path_factory.mktemp("src")
    out = tmp_path_factory.mktemp("wheel")
    _copy_sources(src)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    done = subprocess.run(
        [*cmd, "-w", str(out), str(src)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("kinesis_spout-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_the_wheel_holds_the_product_and_the_harness(wheel_files: list[str]) -> None:
    names = set(wheel_files)
    for needed in (
        "kinesis_spout/spout.py",
        "kinesis_spout/spark/job.py",
        "kinesis_spout/examples/demo.py",
        "kinesis_spout/testing/servers.py",
        "kinesis_spout/testing/zookeeper.py",
        "kinesis_spout/testing/streams.py",
        "tracker/inflight.py",
        "kinesis_spout/py.typed",
    ):
        assert needed in names, f"{needed} missing from the wheel"


def test_the_wheel_holds_no_test_kit(wheel_files: list[str]) -> None:
    kit = ("chaos", "plots", "faultproxy", "proxy_http", "cluster", "localstack")
    shipped = [
        name
        for name in wheel_files
        if name.startswith("devkit/")
        or (name.endswith(".py") and any(part in name for part in kit))
    ]
    assert shipped == []
    assert sum(name.endswith(".py") for name in wheel_files) > 100  # the product is there


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_no_product_module_imports_the_test_kit() -> None:
    offenders = [
        f"{path.relative_to(REPO)} imports {module}"
        for package in PRODUCT
        for path in sorted((REPO / package).rglob("*.py"))
        for module in _imported(path)
        if module == "devkit" or module.startswith("devkit.")
    ]
    assert offenders == []
