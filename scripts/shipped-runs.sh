#!/usr/bin/env bash
# Every run shipped in data/, reproduced from nothing: the induction ladder (four runs,
# scripts/induction-runs.sh) and the two plain-text runs (scripts/reference-run.sh, seeds 1234 and 2).
# Each stage prints its wall time; docs/induction-recipe.md and docs/reference-run.md record them.
# Usage: bash scripts/shipped-runs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/induction-runs.sh all
bash scripts/reference-run.sh
SEED=2 bash scripts/reference-run.sh
