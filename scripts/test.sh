#!/usr/bin/env bash
# Set up the test environment (app + precompute + test requirements, Chromium for
# the browser tests) and run the whole test suite. Extra arguments go to pytest.
# Usage: bash scripts/test.sh [PYTEST ARGS]   (HEADWATCH_TEST_WORKERS=N: N worker processes, 0 for none)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
[ -x .venv/dev/bin/python ] || "$PY" -m venv .venv/dev
.venv/dev/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
.venv/dev/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-peer.txt
# the `headwatch` command, editable (its requirements are the pins above; setuptools and wheel are among them)
.venv/dev/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian's chromium for the browser tests" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "note: /usr/bin/chromium is missing; browser tests will be skipped (apt-get install chromium)" >&2
  fi
fi
# Two worker processes (pytest-xdist), each file's tests on one of them, so a file's module fixtures (a Ray
# cluster, a served app) are made once, on one worker; HEADWATCH_TEST_WORKERS=0 runs in this process alone.
# Most tests wait on a subprocess, a server or Chromium, so two workers on two cores finish the suite in
# about two thirds of the time of one (docs/layout.md).
# One torch (OpenMP) thread per process: two workers, their servers and their subprocesses already fill both
# cores, and a process whose every operation is split over both cores waits at each one for the thread another
# process holds a core from (docs/benchmarks.md, "Watching a run while it trains"; docs/layout.md).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec .venv/dev/bin/python -m pytest -n "${HEADWATCH_TEST_WORKERS:-2}" --dist loadfile "$@"
