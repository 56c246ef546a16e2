#!/usr/bin/env python3
"""Print the largest modules, classes and functions (in lines) under tracker/, kinesis_spout/,
devkit/ and bench/.

Limits: module 400 lines, class 300, function 60 (docs/STYLE). Items over a limit are flagged
with ``OVER``. ``--check`` exits 1 when a function is over; a module or class over its limit
is reported only, as issue 23 has it: one that does one job is fine when its docstring says
why, while a class cut into mixins that share its state, a helper moved only to save lines or
``# fmt: skip`` used to fit a limit is not: ``--check`` also fails on any ``fmt: skip`` or
``fmt: off`` comment under the roots (the code is as ``ruff format`` writes it). Sizes are
ast spans (``end_lineno - lineno + 1``, decorators included), modules count physical lines.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

LIMITS = {"module": 400, "class": 300, "function": 60}
CHECKED = ("function",)
"""The kinds ``--check`` fails on; the others are reported."""
ROOTS = ("tracker", "kinesis_spout", "devkit", "bench")


@dataclass(frozen=True, slots=True)
class Item:
    """One measured unit: its kind, dotted location and size in lines."""

    kind: str
    name: str
    lines: int

    @property
    def over(self) -> bool:
        return self.lines > LIMITS[self.kind]


def _span(node: ast.AST) -> int:
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])  # type: ignore[attr-defined]
    return int(node.end_lineno) - start + 1  # type: ignore[attr-defined]


def measure(path: Path, label: str) -> list[Item]:
    """Return the module, every class and every function (nested too) of one file."""
    text = path.read_text(encoding="utf-8")
    items = [Item("module", label, len(text.splitlines()))]

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = f"{prefix}.{child.name}"
                items.append(Item("class", name, _span(child)))
                walk(child, name)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}.{child.name}"
                items.append(Item("function", name, _span(child)))
                walk(child, name)
            else:
                walk(child, prefix)

    walk(ast.parse(text, filename=str(path)), label)
    return items


def collect(base: Path, roots: tuple[str, ...] = ROOTS) -> list[Item]:
    items: list[Item] = []
    for root in roots:
        for path in sorted((base / root).rglob("*.py")):
            items.extend(measure(path, str(path.relative_to(base))))
    return items


def format_escapes(base: Path, roots: tuple[str, ...] = ROOTS) -> list[str]:
    """``path:line`` of every ``fmt: skip`` / ``fmt: off`` comment under ``roots``."""
    found = []
    for root in roots:
        for path in sorted((base / root).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if "# fmt: skip" in line or "# fmt: off" in line:
                    found.append(f"{path.relative_to(base)}:{n}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="items shown per kind (default 10)")
    parser.add_argument("--check", action="store_true", help="exit 1 when any is over")
    parser.add_argument("--base", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    items = collect(args.base)
    over = [i for i in items if i.over]
    failing = [i for i in over if i.kind in CHECKED]
    for kind, limit in LIMITS.items():
        ranked = sorted((i for i in items if i.kind == kind), key=lambda i: -i.lines)
        shown = {id(i) for i in ranked[: args.top]} | {id(i) for i in ranked if i.over}
        plural = "classes" if kind == "class" else f"{kind}s"
        print(f"largest {plural} (limit {limit}):")
        for item in ranked:
            if id(item) in shown:
                flag = "  OVER" if item.over else ""
                print(f"  {item.lines:5d}  {item.name}{flag}")
    print(f"{len(over)} over the limits, {len(failing)} of them functions (--check fails on those)")
    escapes = format_escapes(args.base)
    for where in escapes:
        print(f"  formatter turned off at {where}")
    return 1 if args.check and (failing or escapes) else 0


if __name__ == "__main__":
    sys.exit(main())
