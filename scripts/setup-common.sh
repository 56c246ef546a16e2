# Shared setup steps for scripts/test.sh and scripts/demo.sh (sourced).
VENV="${KINESIS_SPOUT_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
KINESIS_LOCAL_VERSION="0.6.2"

log() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }

ensure_system_packages() {
  local missing=()
  command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
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

ensure_venv() {  # $1: extras, e.g. "test" or "spark"
  if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating virtualenv $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  log "installing kinesis-spout[$1] into $VENV"
  mkdir -p .cache
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >.cache/pip.log 2>&1 \
    || { tail -40 .cache/pip.log >&2; exit 1; }
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[$1]" >>.cache/pip.log 2>&1 \
    || { grep -v "is ignored" .cache/pip.log | tail -40 >&2; exit 1; }
  "$VENV/bin/python" -c "import kinesis_spout, tracker" || { echo "install of kinesis-spout[$1] failed" >&2; exit 1; }
}

ensure_kinesis_mock() {
  if [[ ! -f .cache/node_modules/kinesis-local/main.js ]]; then
    log "installing kinesis-mock (npm kinesis-local@$KINESIS_LOCAL_VERSION) into .cache/"
    mkdir -p .cache
    npm install --prefix .cache --no-audit --no-fund --silent "kinesis-local@$KINESIS_LOCAL_VERSION"
  fi
}
