# Shared setup steps for scripts/test.sh and scripts/demo.sh (sourced).
VENV="${KINESIS_SPOUT_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
KINESIS_LOCAL_VERSION="0.6.2"

log() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }

ensure_system_packages() {  # $@: what is needed: java, node (default: both)
  local missing=() want=("$@")
  ((${#want[@]})) || want=(java node)
  for tool in "${want[@]}"; do
    case "$tool" in
      java) command -v java >/dev/null 2>&1 || missing+=(default-jre-headless) ;;
      node)
        command -v node >/dev/null 2>&1 || missing+=(nodejs)
        command -v npm >/dev/null 2>&1 || missing+=(npm)
        ;;
    esac
  done
  "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
  if ((${#missing[@]})); then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
      log "installing ${missing[*]} from Debian"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
      echo "missing: ${missing[*]} (install them, or run as root with apt-get)" >&2
      exit 1
    fi
  fi
}

ensure_venv() {  # $1: extras, e.g. "test" or "spark"; more arguments: pip requirements too
  local pip_log=.cache/pip.log
  [[ "$VENV" == .venv ]] || pip_log=".cache/pip-$(basename "$VENV").log"
  if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating virtualenv $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  log "installing kinesis-spout[$1] ${*:2} into $VENV"
  mkdir -p .cache
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >"$pip_log" 2>&1 \
    || { tail -40 "$pip_log" >&2; exit 1; }
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[$1]" "${@:2}" >>"$pip_log" 2>&1 \
    || { grep -v "is ignored" "$pip_log" | tail -40 >&2; exit 1; }
  "$VENV/bin/python" -c "import kinesis_spout, tracker" || { echo "install of kinesis-spout[$1] failed" >&2; exit 1; }
  if [[ "$1" == *test* || "$1" == *dev* ]]; then
    # devkit/ (the chaos runner, plots, fault proxy, cluster and LocalStack fixtures) is not in
    # the wheel; tests, bench/ and the Spark workers they start import it from the checkout.
    "$VENV/bin/python" - "$PWD" <<'PY'
import sys, sysconfig
from pathlib import Path
Path(sysconfig.get_paths()["purelib"], "kinesis_spout_devkit.pth").write_text(sys.argv[1] + "\n")
PY
    "$VENV/bin/python" -c "import devkit" || { echo "devkit/ is not importable from $VENV" >&2; exit 1; }
  fi
}

# The Spark job's end-to-end tests (marker spark35) run a second time on the newest PySpark
# 3.5 (EMR 7 and many Databricks runtimes), in a virtualenv of their own.
SPARK35_VENV=.cache/spark35-venv
SPARK35_PYSPARK="pyspark>=3.5,<3.6"

ensure_spark35_venv() {
  VENV="$SPARK35_VENV" ensure_venv test "$SPARK35_PYSPARK"
  "$SPARK35_VENV/bin/python" -c 'import pyspark, sys; sys.exit(not pyspark.__version__.startswith("3.5."))' \
    || { echo "$SPARK35_VENV does not hold PySpark 3.5" >&2; exit 1; }
}

ensure_kinesis_mock() {
  if [[ ! -f .cache/node_modules/kinesis-local/main.js ]]; then
    log "installing kinesis-mock (npm kinesis-local@$KINESIS_LOCAL_VERSION) into .cache/"
    mkdir -p .cache
    npm install --prefix .cache --no-audit --no-fund --silent "kinesis-local@$KINESIS_LOCAL_VERSION"
  fi
}

# LocalStack in host mode (no docker) for the LocalStack tests. It gets a virtualenv of its
# own: its dependencies clash with the project's, releases after 4.9.2 do not import on
# Python 3.11, and some of its dependencies need pins. Its Kinesis engine (npm kinesis-local,
# the version LocalStack 4.9.2 asks for) is installed ahead of time into
# .cache/localstack-libs/kinesis-local/<version>/ (the layout of LocalStack's own
# var/lib/localstack/lib); devkit/localstack.py links it into LocalStack's
# FILESYSTEM_ROOT, so LocalStack never runs `npm install` itself.
LOCALSTACK_VERSION="4.9.2"
LOCALSTACK_KINESIS_LOCAL_VERSION="0.4.13"
LOCALSTACK_PIP_SPECS=(
  "localstack-core[base-runtime]==$LOCALSTACK_VERSION"
  "cbor2<6" "pyopenssl==24.3.0" "cryptography<45" "psutil<7" "service_identity"
)

ensure_localstack() {
  local venv=.cache/localstack-venv
  local marker="$venv/.kinesis-spout-installed"
  if [[ ! -x "$venv/bin/python" || "$(cat "$marker" 2>/dev/null)" != "${LOCALSTACK_PIP_SPECS[*]}" ]]; then
    log "installing localstack-core $LOCALSTACK_VERSION into $venv"
    mkdir -p .cache
    rm -f "$marker"
    [[ -x "$venv/bin/python" ]] || "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip \
      >.cache/localstack-pip.log 2>&1 || { tail -40 .cache/localstack-pip.log >&2; exit 1; }
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "${LOCALSTACK_PIP_SPECS[@]}" \
      >>.cache/localstack-pip.log 2>&1 || { tail -40 .cache/localstack-pip.log >&2; exit 1; }
    "$venv/bin/python" -c "import localstack.runtime.main, hypercorn" \
      || { echo "LocalStack $LOCALSTACK_VERSION does not import in $venv" >&2; exit 1; }
    echo "${LOCALSTACK_PIP_SPECS[*]}" >"$marker"
  fi
  local engine=".cache/localstack-libs/kinesis-local/$LOCALSTACK_KINESIS_LOCAL_VERSION"
  if [[ ! -f "$engine/node_modules/kinesis-local/main.js" ]]; then
    log "installing LocalStack's Kinesis engine (npm kinesis-local@$LOCALSTACK_KINESIS_LOCAL_VERSION) into $engine"
    mkdir -p "$engine"
    npm install --prefix "$engine" --no-audit --no-fund --silent \
      "kinesis-local@$LOCALSTACK_KINESIS_LOCAL_VERSION"
  fi
}
