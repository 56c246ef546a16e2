"""``kinesis-spout run --ship-env``: this virtualenv, packed and shipped to the executors.

Spark's own way to give executors a Python environment: a packed virtualenv passed as
``--archives ENV.tar.gz#environment`` (each executor unpacks it as ``environment/`` in
its working directory) with ``spark.pyspark.python=./environment/bin/python``; in
client mode the driver keeps this Python. The pack is made by venv-pack (the ``ship``
extra) from a staging copy of the virtualenv made of hard links (no bytes copied), in
which: pyspark is left out (each executor's Spark puts its own first on the path); a
project installed editable (``pip install -e``, whose code stays in its checkout) is
built into a wheel and installed instead; a ``.pth`` file that adds a directory outside
the virtualenv is left out (said once). venv-pack ships no interpreter: the executors
need the same Python at the same path (docs/deploy.md).

A job whose executors cannot import kinesis_spout fails at once with one line saying so
(:func:`~kinesis_spout.spark.isolation.missing_on_executors`), instead of splitting its
micro-batch in vain.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from kinesis_spout.errors import KinesisSpoutError

log = logging.getLogger(__name__)

ALIAS = "environment"
"""The directory each executor unpacks the archive into (``#environment``)."""
PACK_NOW = "-"
"""``--ship-env`` without an archive: pack this virtualenv now."""
LEFT_OUT = ("pyspark", "pyspark-*.dist-info")
"""What the executors' Spark brings itself (its ``pyspark.zip`` comes first on the path)."""


class ShipEnvError(KinesisSpoutError):
    """The virtualenv cannot be packed (not a virtualenv, venv-pack missing, a build failed)."""


def ship_env_arguments(archive: str | Path, deploy_mode: str = "client") -> list[str]:
    """The spark-submit arguments that ship ``archive`` and run the executors' Python
    (and, in cluster mode, the driver's) from it."""
    args = ["--archives", f"{archive}#{ALIAS}"]
    conf = {"spark.pyspark.python": f"./{ALIAS}/bin/python"}
    if deploy_mode == "client":  # the driver runs here: this Python, not the archive's
        conf["spark.pyspark.driver.python"] = sys.executable
    return args + [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]


@contextlib.contextmanager
def shipped_env(value: str | None, deploy_mode: str, dry_run: bool = False) -> Iterator[list[str]]:
    """The spark-submit arguments of ``--ship-env`` (``value``: None, not asked;
    :data:`PACK_NOW`; or an archive made beforehand), the packed archive removed on exit.
    ``dry_run``: nothing is packed, the arguments name where it would be."""
    if value is None:
        yield []
        return
    if value != PACK_NOW:
        if not Path(value).is_file():
            raise ShipEnvError(f"--ship-env {value!r}: no such archive")
        yield ship_env_arguments(Path(value).resolve(), deploy_mode)
        return
    if dry_run:
        yield ship_env_arguments(
            Path(tempfile.gettempdir(), "kinesis-spout-env.tar.gz"), deploy_mode
        )
        return
    workdir = Path(tempfile.mkdtemp(prefix="kinesis-spout-env-"))
    try:
        archive = pack_virtualenv(Path(sys.prefix).resolve(), workdir)
        yield ship_env_arguments(archive, deploy_mode)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def pack_virtualenv(prefix: Path, workdir: Path) -> Path:
    """``workdir/kinesis-spout-env.tar.gz``: the virtualenv at ``prefix``, staged and packed
    (see the module docstring)."""
    try:
        import venv_pack
    except ImportError:
        raise ShipEnvError(
            "--ship-env needs venv-pack (the 'ship' extra): pip install venv-pack"
        ) from None
    if not (prefix / "pyvenv.cfg").is_file():
        raise ShipEnvError(
            f"--ship-env packs the virtualenv kinesis-spout runs in, and {prefix} is none: "
            "run kinesis-spout from a virtualenv"
        )
    site = _site_packages(prefix)
    editable = _editable_sources(site)
    wheels = [_build_wheel(source, workdir / "wheels") for source in editable.values()]
    stage = workdir / "stage"
    log.info("--ship-env: packing %s for the executors (this takes a while)", prefix)
    _stage(prefix, stage, _left_out(prefix, site, editable))
    for wheel in wheels:
        _unpack_wheel(wheel, stage / site.relative_to(prefix))
    archive = workdir / "kinesis-spout-env.tar.gz"
    venv_pack.pack(prefix=str(stage), output=str(archive), compress_level=1)
    shutil.rmtree(stage, ignore_errors=True)
    log.info("--ship-env: %s (%.0f MB)", archive, archive.stat().st_size / 1e6)
    return archive


def _site_packages(prefix: Path) -> Path:
    found = sorted(prefix.glob("lib/python*/site-packages"))
    if len(found) != 1:
        raise ShipEnvError(f"--ship-env: {prefix} has {len(found)} lib/python*/site-packages")
    return found[0]


def _editable_sources(site: Path) -> dict[str, Path]:
    """``{distribution: its source directory}`` of the projects installed editable."""
    found: dict[str, Path] = {}
    for dist in metadata.distributions(path=[str(site)]):
        text = dist.read_text("direct_url.json")
        info = json.loads(text) if text else {}
        url = str(info.get("url", ""))
        if info.get("dir_info", {}).get("editable") and url.startswith("file://"):
            found[dist.metadata["Name"]] = Path(url.removeprefix("file://"))
    return found


def _left_out(prefix: Path, site: Path, editable: dict[str, Path]) -> set[Path]:
    """What the staging copy leaves out: pyspark, the editable installs' own files (their
    wheels replace them), and ``.pth`` files naming directories outside ``prefix``."""
    out = {p for pattern in LEFT_OUT for p in site.glob(pattern)}
    for dist in metadata.distributions(path=[str(site)]):
        if dist.metadata["Name"] in editable:
            out.update(Path(site, str(f)).resolve() for f in dist.files or ())
    for pth in site.glob("*.pth"):
        lines = [ln.strip() for ln in pth.read_text().splitlines()]
        outside = [
            ln
            for ln in lines
            if ln
            and not ln.startswith(("#", "import ", "import\t"))
            and not Path(os.path.normpath(site / ln)).is_relative_to(prefix)
        ]
        if outside and pth.resolve() not in out:
            log.warning("--ship-env: left out %s (it adds %s)", pth.name, ", ".join(outside))
            out.add(pth)
    return {p.resolve() for p in out}


def _stage(prefix: Path, stage: Path, left_out: set[Path]) -> None:
    """``prefix`` mirrored at ``stage`` with hard links (copies across file systems)."""
    for root, dirs, files in os.walk(prefix):
        here = Path(root)
        target = stage / here.relative_to(prefix)
        target.mkdir(parents=True, exist_ok=True)
        for name in list(dirs):
            path = here / name
            if path.is_symlink():
                dirs.remove(name)
                os.symlink(os.readlink(path), target / name)
            elif path.resolve() in left_out:
                dirs.remove(name)
        for name in files:
            path = here / name
            if path.is_symlink():
                os.symlink(os.readlink(path), target / name)
            elif path.resolve() not in left_out:
                try:
                    os.link(path, target / name)
                except OSError:
                    shutil.copy2(path, target / name)


def _build_wheel(source: Path, out: Path) -> Path:
    """A wheel of the project at ``source`` (its own build backend, from this virtualenv
    when that has it, else in pip's isolated build environment)."""
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.glob("*.whl"))
    base = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out)]
    log.info("--ship-env: building a wheel of %s (installed editable)", source)
    for isolation in (["--no-build-isolation"], []):
        done = subprocess.run(
            [*base, *isolation, str(source)], capture_output=True, text=True, check=False
        )
        if done.returncode == 0:
            break
    else:
        last = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise ShipEnvError(f"--ship-env: no wheel of {source} (installed editable): {last[0]}")
    new = set(out.glob("*.whl")) - before
    if len(new) != 1:
        raise ShipEnvError(f"--ship-env: building {source} left {len(new)} new wheels")
    return new.pop()


def _unpack_wheel(wheel: Path, site: Path) -> None:
    """The wheel's files into ``site`` (new files: the staged ones are hard links of the
    virtualenv's, never written through); its ``.data`` scripts are not needed there."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            data = re.match(r"[^/]+\.data/(purelib|platlib)/(.+)", name)
            if data:
                name = data.group(2)
            elif re.match(r"[^/]+\.data/", name) or info.is_dir():
                continue
            dest = site / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.unlink(missing_ok=True)
            with zf.open(info) as src, open(dest, "xb") as dst:
                shutil.copyfileobj(src, dst)
