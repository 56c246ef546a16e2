"""The README and docs/ say what the code does: a test fails when a link, a command, a
config key or a metric name in them no longer matches the code.

* every relative link names a file that exists, and an anchor a heading of it;
* every ``kinesis-spout ...`` command in a code block or a code span names subcommands and
  flags the command line has (``--help`` would show them), every ``python -m`` module and
  ``python bench/...`` script exists;
* every key of a TOML block is a config field, and the configuration table
  (docs/configuration.md) names every :class:`SpoutConfig` field and nothing else;
* every ``kinesis_spout_*`` metric name is one the endpoint exports;
* every ``from kinesis_spout... import`` in a Python block imports;
* the docstring of each of ``spark``'s packages names its modules, and only them.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from kinesis_spout.cli import build_parser
from kinesis_spout.config import SpoutConfig
from kinesis_spout.observability.names import SPECS

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def blocks(text: str) -> Iterator[tuple[str, str]]:
    """(language, body) of each fenced code block."""
    for m in FENCE.finditer(text):
        yield m.group(1), m.group(2)


def prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose(path.read_text()).splitlines():
        if line.startswith("#"):
            s = slug(line.lstrip("#"))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


# --- links ---------------------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_every_link_names_a_file_and_a_heading_that_exist(doc: Path) -> None:
    broken = []
    for target in LINK.findall(prose(doc.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(f"{target}: no file {path}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {rel(path)}")
    assert broken == []


# --- commands ------------------------------------------------------------------------


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command path (``dead-letters redrive``) and its parser."""
    out: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        out[path] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, f"{path} {name}".strip())

    walk(build_parser(), "")
    return out


PARSERS = _parsers()


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def commands(text: str) -> Iterator[str]:
    """Each ``kinesis-spout ...`` command: a line of a shell block (its comment cut), or a
    code span of the prose."""
    for lang, body in blocks(text):
        if lang in ("bash", "sh", "console", ""):
            for line in body.splitlines():
                line = line.removeprefix("$ ").split(" #", 1)[0]
                if re.match(r"\s*(kinesis-spout|python3? -m kinesis_spout)\b", line):
                    yield line.strip()
    for span in re.findall(r"`([^`\n]+)`", prose(text)):
        if span.startswith("kinesis-spout ") and not re.match(r"kinesis-spout [^:]*:\s", span):
            yield span  # an error message says its command too: not one to run


def command_problem(command: str) -> str | None:
    """What in ``command`` the command line does not have, or None."""
    words = command.replace("|", " ").replace("[", " ").replace("]", " ").split()
    words = words[1:]  # kinesis-spout
    if words and words[0].startswith("<"):  # kinesis-spout <command> --help
        return None
    path = ""
    while words and not words[0].startswith("-") and f"{path} {words[0]}".strip() in PARSERS:
        path = f"{path} {words.pop(0)}".strip()
    if not path:
        return f"no subcommand in {command!r}" if words and not words[0].startswith("-") else None
    known = _flags(PARSERS[path]) | {"--help", "-v", "--verbose"}
    for word in words:
        flag = word.split("=", 1)[0].rstrip(",.;:)")
        if flag.startswith("--") and re.fullmatch(r"--[a-z][a-z-]*", flag) and flag not in known:
            return f"{flag} is not a flag of 'kinesis-spout {path}' in {command!r}"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_every_kinesis_spout_command_has_those_subcommands_and_flags(doc: Path) -> None:
    problems = []
    for command in commands(doc.read_text()):
        if command.startswith("python"):
            module = command.split()[2]
            if importlib.util.find_spec(module) is None:
                problems.append(f"no module {module}")
            continue
        problem = command_problem(command)
        if problem:
            problems.append(problem)
    assert problems == []


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_every_bench_script_and_module_named_exists(doc: Path) -> None:
    text = doc.read_text()
    missing = [s for s in re.findall(r"\b(bench/[a-z_]+\.py)", text) if not (REPO / s).exists()]
    missing += [
        m
        for m in re.findall(r"python3? -m (kinesis_spout[\w.]*)", text)
        if importlib.util.find_spec(m) is None
    ]
    assert missing == []


# --- config keys ---------------------------------------------------------------------

FIELDS = {f.name for f in dataclasses.fields(SpoutConfig)}
STREAM_ENTRY_KEYS = {"stream", "initial_position", "initial_timestamp", "consumer"}


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_every_key_of_a_toml_block_is_a_config_field(doc: Path) -> None:
    unknown = []
    for lang, body in blocks(doc.read_text()):
        if lang != "toml":
            continue
        for key in re.findall(r"^\s*([a-z_]+)\s*=", body, flags=re.M):
            if key not in FIELDS and key not in STREAM_ENTRY_KEYS:
                unknown.append(key)
    assert unknown == []


def table_keys(doc: str) -> set[str]:
    """The backticked names in the first column of the configuration table."""
    keys: set[str] = set()
    for line in doc.splitlines():
        if line.startswith("| `"):
            keys.update(re.findall(r"`([a-z_]+)`", line.split("|")[1]))
    return keys


def test_the_configuration_table_names_every_field_and_nothing_else() -> None:
    keys = table_keys((REPO / "docs" / "configuration.md").read_text())
    assert sorted(FIELDS - keys) == [], "fields missing from docs/configuration.md's table"
    assert sorted(keys - FIELDS) == [], "keys in docs/configuration.md's table that are not fields"


# --- metric names --------------------------------------------------------------------

FAMILIES = {s.family for s in SPECS} | {s.deprecated for s in SPECS if s.deprecated}
SUFFIXES = ("_bucket", "_count", "_sum")


def known_metric(name: str) -> bool:
    if name in FAMILIES or name + "_total" in FAMILIES:
        return True
    return any(name.endswith(s) and name.removesuffix(s) in FAMILIES for s in SUFFIXES)


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_every_metric_name_is_one_the_endpoint_exports(doc: Path) -> None:
    names = set(re.findall(r"\bkinesis_spout_[a-z_]*[a-z]\b", doc.read_text()))
    unknown = sorted(
        n for n in names if not known_metric(n) and not n.startswith("kinesis_spout_<")
    )
    assert unknown == []


# --- Python imports ------------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_every_import_of_the_package_in_a_python_block_imports(doc: Path) -> None:
    missing = []
    for lang, body in blocks(doc.read_text()):
        if lang != "python":
            continue
        found = re.findall(r"^\s*from (kinesis_spout[\w.]*) import \(([\w,\s]+)\)", body, re.M)
        found += re.findall(r"^\s*from (kinesis_spout[\w.]*) import ([\w, ]+)$", body, re.M)
        for module, names in found:
            mod = importlib.import_module(module)
            for name in (n.strip() for n in names.replace("\n", ",").split(",")):
                if name and not hasattr(mod, name):
                    missing.append(f"{module}.{name}")
    assert missing == []


# --- package docstrings ----------------------------------------------------------------

SPARK = REPO / "kinesis_spout" / "spark"


@pytest.mark.parametrize("package", ["launch", "process", "read"])
def test_a_spark_package_s_docstring_names_its_modules_and_only_them(package: str) -> None:
    mod = importlib.import_module(f"kinesis_spout.spark.{package}")
    named = set(re.findall(r"``(\w+)``", mod.__doc__ or ""))
    modules = {p.stem for p in (SPARK / package).glob("*.py") if p.stem != "__init__"}
    assert (sorted(named - modules), sorted(modules - named)) == ([], [])
