#!/usr/bin/env bash
# Set up everything from scratch and run the whole suite:
#   ruff, mypy --strict, pytest (unit + integration against real servers).
# Installs: a virtualenv in .venv with the project and its test extras (PyPI),
# kinesis-mock from npm into .cache/, and Java/Node from Debian if missing.
# Extra arguments go to pytest, e.g. `scripts/test.sh tests/unit -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-common.sh

ensure_system_packages java node
ensure_venv test
ensure_kinesis_mock
ensure_localstack

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
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=30 -n 2 --dist loadfile "$@"
