"""spark-submit's ``pyspark.zip`` or the installed pyspark: the same code, imported faster.

``spark-submit`` puts ``$SPARK_HOME/python/lib/pyspark.zip`` and the py4j zip first on
the driver's and the Python workers' path. With pip's pyspark, ``$SPARK_HOME`` *is*
the installed package, so those zips hold the very modules installed beside them; but
Python imports a zip from source, every time (no compiled files), which slows the start
of the job's driver and of each worker daemon (docs/figures.md). The job's driver and its
worker daemon (:mod:`kinesis_spout.spark.launch.worker_daemon`) put the zips last when they
are the installed package's own.
"""

from __future__ import annotations

import importlib.machinery
from pathlib import Path


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` with spark-submit's ``pyspark.zip`` and py4j zip moved last when they are
    the ``python/lib`` zips of the pyspark installed elsewhere on ``path``: the same code,
    imported from compiled files instead of a zip. Zips of another Spark installation
    stay where they are."""
    zips = [p for p in path if p.endswith(".zip") and Path(p).name.startswith(("pyspark", "py4j"))]
    rest = [p for p in path if p not in zips]
    spec = importlib.machinery.PathFinder.find_spec("pyspark", rest)
    if not zips or spec is None or spec.origin is None:
        return path
    installed = Path(spec.origin).parent
    if any(Path(z).parent != installed / "python" / "lib" for z in zips):
        return path
    return rest + zips
