"""The Spark job's parts stand in layers: no import of ``kinesis_spout/spark/`` runs back up.

Each module of ``spark/`` is a part, and so is each of its folders (``launch/``, ``read/``,
``process/``) as a whole: an import from one part into another, at the top of a module or
inside a function, is an arrow. The arrows must form no circle, so that the parts stand
in floors, each importing only those below it.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import kinesis_spout.spark

SPARK = Path(kinesis_spout.spark.__file__).parent
PREFIX = "kinesis_spout.spark."


def part_of(module: str) -> str:
    """The part a dotted module name below ``kinesis_spout.spark`` belongs to."""
    return module.removeprefix(PREFIX).split(".")[0]


def imported_modules(path: Path) -> set[str]:
    """Every ``kinesis_spout.spark`` module a file imports, wherever the import stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "kinesis_spout.spark":
                found.update(f"{PREFIX}{alias.name}" for alias in node.names)
            elif node.module.startswith(PREFIX):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(PREFIX))
    return found


def arrows() -> dict[str, set[str]]:
    """Part -> the other parts it imports (the package's own ``__init__`` left out: it
    only hands names on, loading them on first use)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(SPARK.rglob("*.py")):
        rel = path.relative_to(SPARK)
        if rel == Path("__init__.py"):
            continue
        part = rel.parts[0].removesuffix(".py")
        targets = {part_of(m) for m in imported_modules(path)} - {part}
        graph.setdefault(part, set()).update(targets)
    return graph


def a_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph, as the parts along it in the direction of the imports
    (None: there is none)."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:  # its nodes each imported by the next one
        return list(reversed(err.args[1]))
    return None


def test_a_circle_is_found_and_named() -> None:
    assert a_circle({"loop": {"launch"}, "launch": {"plan", "loop"}, "plan": set()}) == [
        "loop",
        "launch",
        "loop",
    ]
    assert a_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert a_circle({"job": {"loop", "launch"}, "launch": {"loop"}, "loop": set()}) is None


def test_the_spark_parts_import_each_other_in_no_circle() -> None:
    graph = arrows()
    assert {"job", "submit", "loop", "plan", "task", "launch", "read", "process"} <= set(graph)
    circle = a_circle(graph)
    assert circle is None, "an import runs back up: " + " -> ".join(circle or [])
