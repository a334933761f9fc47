#!/usr/bin/env bash
# Set up the dashboard's virtual environment (requirements.txt only) and start it.
# Usage: bash scripts/dashboard.sh            (serves http://127.0.0.1:8501)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
[ -x .venv/app/bin/python ] || "$PY" -m venv .venv/app
.venv/app/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
exec .venv/app/bin/python -m headwatch.dashboard.serve \
  --server.address "${HOST:-127.0.0.1}" --server.port "${PORT:-8501}" \
  --server.headless true --browser.gatherUsageStats false "$@"
