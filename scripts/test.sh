#!/usr/bin/env bash
# Set up everything from scratch and run the whole suite:
#   ruff, mypy --strict, pytest (unit + integration against real servers).
# Installs: a virtualenv in .venv with the project and its test extras (PyPI),
# kinesis-mock from npm into .cache/, and Java/Node from Debian if missing.
# Without arguments it then runs the Spark job's end-to-end tests (marker spark35) again on
# PySpark 3.5, from .cache/spark35-venv. Extra arguments go to pytest and run only those,
# e.g. `scripts/test.sh tests/unit -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-common.sh

ensure_system_packages java node
ensure_venv test
ensure_kinesis_mock
ensure_localstack
(($#)) || ensure_spark35_venv  # the whole suite: the Spark job on PySpark 3.5 as well

echo "== ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
echo "== sizes (functions over 60 lines, formatter escapes)"
"$VENV/bin/python" scripts/sizes.py --check --top 0
echo "== mypy --strict"
"$VENV/bin/mypy" --strict tracker kinesis_spout devkit bench
echo "== pytest"
# Two processes (pytest-xdist), a test file's tests in one of them: most tests wait on JVMs
# and emulators, so two take about 2/3 of the time of one on two cores. `-n 0`: one process.
status=0
"$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=30 -n 2 --dist loadfile "$@" \
  || status=$?
if ((!$#)); then
  echo "== pytest on PySpark 3.5: the Spark job's end-to-end tests (-m spark35)"
  "$SPARK35_VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=10 -n 2 \
    --dist loadfile -m spark35 || status=$?
fi
exit "$status"
