"""A job's own virtualenv, made from this one without the network.

:func:`job_virtualenv` makes a virtualenv holding a requirement (``kinesis-spout[spark,ship]``)
and its dependencies, and pip, setuptools and wheel as ``python -m venv`` gives them: the
files of each distribution installed here, hard links (copies across file systems), so
that it takes a second. An editable install stays editable (its ``.pth`` and finder point
at the checkout), as ``pip install -e '.[spark,ship]'`` would leave it; a script whose
first line runs this environment's Python runs the new one's. What ``--ship-env`` packs of
it is what a job needs, not this environment's test tools.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

BASE = ("pip", "setuptools", "wheel")
"""What a virtualenv has besides the requirement (pip builds an editable project's wheel)."""


def _key(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _installed(name: str, site: Path) -> metadata.Distribution:
    """The distribution ``name`` installed in ``site`` (not a checkout's metadata on the path)."""
    for dist in metadata.distributions(name=name, path=[str(site)]):
        return dist
    raise metadata.PackageNotFoundError(name)


def distributions(requirement: str, site: Path) -> list[metadata.Distribution]:
    """The distributions of ``requirement`` and its dependencies (with extras) installed in
    ``site``."""
    found: dict[str, set[str]] = {}
    todo = [Requirement(requirement), *(Requirement(b) for b in BASE)]
    while todo:
        req = todo.pop()
        key, extras = _key(req.name), set(req.extras)
        if key in found and extras <= found[key]:
            continue
        found[key] = found.get(key, set()) | extras
        for text in _installed(req.name, site).requires or ():
            dep = Requirement(text)
            envs = [{"extra": e} for e in sorted(found[key])] or [{"extra": ""}]
            if dep.marker is None or any(dep.marker.evaluate(env) for env in envs):
                todo.append(dep)
    return [_installed(name, site) for name in sorted(found)]


def job_virtualenv(dest: Path, requirement: str = "kinesis-spout[spark,ship]") -> Path:
    """A virtualenv at ``dest`` with ``requirement`` as installed here; its Python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    here = Path(sysconfig.get_paths()["purelib"])
    site = dest / here.relative_to(sys.prefix)
    python = dest / "bin" / "python"
    for dist in distributions(requirement, here):
        for name in dist.files or ():
            source = Path(str(dist.locate_file(name)))
            target = Path(os.path.normpath(site / name))
            if source.is_file() and target.is_relative_to(dest) and not target.exists():
                _place(source, target, python)
    return python


def _place(source: Path, target: Path, python: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with source.open("rb") as fh:
        first = fh.readline()
    if first.startswith(b"#!") and first[2:].strip() == sys.executable.encode():
        target.write_bytes(b"#!" + str(python).encode() + b"\n" + source.read_bytes()[len(first) :])
        shutil.copymode(source, target)
        return
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
