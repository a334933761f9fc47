#!/usr/bin/env bash
# The induction-head runs: one recipe (docs/induction-recipe.md, "The recipe"), a ladder
# of four sizes and a second seed of d128; each run trained (runs/, not committed) and turned into a
# store with every lens, the refined LLC at every checkpoint (data/).
# Usage:
#   bash scripts/induction-runs.sh                  # every run and store, one after the other
#   bash scripts/induction-runs.sh train SIZE SEED  # one run into runs/ih-SIZE-sSEED (SIZE: d64, d128, d256, d512)
#   bash scripts/induction-runs.sh store SIZE SEED  # its store, data/induction-SIZE (seed 1234) or -seedSEED
# A finished training run (one with run.json) is reused. Stores are built under runs/ and moved to
# data/ at the end. Each stage prints its wall time.
# Environment: DEVICE (cpu, the default, or cuda: training and every lens on the GPU);
# INSTALL=0 uses the Python on PATH as it is (a machine without a package registry);
# LLC_STEPS (default all: the refined LLC at every checkpoint); LLC_DATA (default train,text,repeats,code).
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cpu}
if [ "${INSTALL:-1}" = 0 ]; then
  RUN_PY=$(command -v python3)
else
  VENV=${VENV:-.venv/dev}
  PY=${PYTHON:-python3.11}
  command -v "$PY" >/dev/null || PY=python3
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-training.txt
  RUN_PY=$VENV/bin/python
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one core per run: two runs train side by side on two cores
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# the rLLC's checkpoints: every one (LLC_STEPS=0,64,256,... for a chosen few)
LLC_STEPS=${LLC_STEPS:-all}
# the distributions the refined LLC's SGLD loss is taken on (docs/precompute.md, "--llc-data")
LLC_DATA=${LLC_DATA:-train,text,repeats,code}

shape() {  # SIZE -> model options (2 layers; GPT-2 with learned positions; d_mlp = 4 d_model)
  case "$1" in
    d64) echo "--n-heads 4 --d-model 64 --d-mlp 256" ;;
    d128) echo "--n-heads 8 --d-model 128 --d-mlp 512" ;;
    d256) echo "--n-heads 8 --d-model 256 --d-mlp 1024" ;;
    d512) echo "--n-heads 8 --d-model 512 --d-mlp 2048" ;;
    *) echo "unknown size $1 (d64, d128, d256 or d512)" >&2; exit 2 ;;
  esac
}

train() {  # SIZE SEED
  local run=runs/ih-$1-s$2 start=$SECONDS
  if [ -f "$run/run.json" ]; then
    echo "reusing the finished training run in $run (delete it to train again)" >&2
    return
  fi
  rm -rf "$run"
  # shellcheck disable=SC2046  # the shape is several words on purpose
  "$RUN_PY" -m headwatch.training --out "$run" --device "$DEVICE" --cache runs/.cache \
    --arch gpt2 --n-layers 2 $(shape "$1") --context 64 \
    --steps 4000 --batch-size 64 --lr 1e-3 --warmup-frac 0.025 \
    --repeat-share 1.0 --repeat-spans 2 --repeat-min 8 --repeat-max 24 --repeat-content random \
    --checkpoint-every 250 --dense-from 600 --dense-to 3600 --dense-every 100 --seed "$2"
  echo "trained $run in $((SECONDS - start)) s" >&2
}

store() {  # SIZE SEED
  local name=induction-$1 start=$SECONDS
  [ "$2" = 1234 ] || name=$name-seed$2
  local stage=runs/$name-store
  rm -rf "$stage"
  # the evaluation windows are 64 tokens, the training context (so the induction probe repeats R = 32)
  "$RUN_PY" -m headwatch.precompute --source "runs/ih-$1-s$2" --out "$stage" --device "$DEVICE" --model-id "$name" --no-progress \
    --eval-length 64 --lenses attention --lenses composition --lenses similarity --lenses essential \
    --lenses losses --lenses ablation --lenses llc --llc-steps "$LLC_STEPS" --llc-data "$LLC_DATA"
  rm -rf "data/$name"
  mv "$stage" "data/$name"
  echo "store data/$name in $((SECONDS - start)) s ($(du -sh "data/$name" | cut -f1))" >&2
}

usage() { sed -n 2,10p "$0"; exit 2; }
case "${1:-all}" in
  train) [ $# -eq 3 ] || usage; shape "$2" >/dev/null; train "$2" "$3" ;;
  store) [ $# -eq 3 ] || usage; shape "$2" >/dev/null; store "$2" "$3" ;;
  all)
    for run in "d128 1234" "d128 2" "d64 1234" "d256 1234" "d512 1234"; do
      # shellcheck disable=SC2086  # SIZE SEED
      train $run
      # shellcheck disable=SC2086
      store $run
    done
    ;;
  *) usage ;;
esac
