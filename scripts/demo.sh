#!/usr/bin/env bash
# The demo, from a fresh machine (Python >= 3.11; as root it installs Java if missing):
#   creates .venv with kinesis-spout[spark,demo] (PySpark, pyarrow, moto's server),
#   starts a local Kinesis emulator (moto server), creates the demo stream and puts
#   sample sentences, runs Storm's word count with spark-submit on local[2] with
#   file checkpoints, prints the counts and where the checkpoints and dead letters
#   are, and stops what it started. Run it again: it resumes from the checkpoints.
# Extra arguments go to `kinesis-spout demo` (--fresh, --output DIR, --sentences N).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-common.sh

ensure_system_packages java
ensure_venv spark,demo
exec "$VENV/bin/kinesis-spout" demo "$@"
