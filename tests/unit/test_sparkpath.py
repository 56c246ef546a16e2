"""spark-submit's pyspark zips moved after the installed pyspark they come from."""

from __future__ import annotations

from pathlib import Path

from kinesis_spout.spark.launch.sparkpath import prefer_installed_pyspark


def installed(site: Path) -> tuple[str, str]:
    """A pyspark package under ``site`` with its python/lib zips (as pip installs it)."""
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    for name in ("pyspark.zip", "py4j-0.10.9.9-src.zip"):
        (lib / name).write_bytes(b"")
    return str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")


def test_the_installed_packages_own_zips_go_last(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    zip1, zip2 = installed(site)
    path = ["/job", zip1, zip2, str(site), "/other"]
    assert prefer_installed_pyspark(path) == ["/job", str(site), "/other", zip1, zip2]


def test_zips_of_another_spark_stay_first(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    installed(site)
    other = tmp_path / "spark-3.5" / "python" / "lib"
    other.mkdir(parents=True)
    path = [str(other / "pyspark.zip"), str(other / "py4j-0.10.9.7-src.zip"), str(site)]
    assert prefer_installed_pyspark(path) == path


def test_without_an_installed_pyspark_nothing_moves(tmp_path: Path) -> None:
    zips = [str(tmp_path / "lib" / "pyspark.zip"), str(tmp_path / "lib" / "py4j-src.zip")]
    path = [*zips, str(tmp_path / "empty-site")]
    assert prefer_installed_pyspark(path) == path
