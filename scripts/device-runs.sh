#!/usr/bin/env bash
# The shipped induction runs, retrained and their stores rebuilt on one CUDA machine (the device
# machine of docs/induction-recipe.md, "Trained on a GPU"), with the CUDA tests and benchmarks beside
# them. Five chains run side by side, one per run (scripts/induction-runs.sh train, then store, with
# DEVICE=cuda): d128 seeds 1234 and 2, d64, d256 and d512.
# Usage (on the GPU machine, in the repository root, wheels of the missing packages under .whl/):
#   bash scripts/device-runs.sh start SECONDS    # install, start the five chains in the background
#                                                #   (setsid), run `pytest -m cuda`, report until SECONDS
#   bash scripts/device-runs.sh collect SECONDS  # wait for the chains (at most SECONDS), then the
#                                                #   CUDA benchmarks if time is left
# Every finished store is packed into $OUT/stores-<name>.tar.gz as soon as it is done; logs go to
# $OUT/logs.tar.gz. A chain's own log: runs/logs/<name>.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT" runs/logs
START=$SECONDS
LIMIT=${2:-300}
RUNS=("d128 1234" "d128 2" "d64 1234" "d256 1234" "d512 1234")

install() {
  # into the interpreter itself, so that the subprocesses the tests start see them too
  if [ ! -f /tmp/wheels.done ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .whl/*.whl \
      && touch /tmp/wheels.done || { echo "wheels did not install" >&2; exit 1; }
  fi
  export PYTHONPATH=$PWD
}

name_of() {  # SIZE SEED -> store name
  if [ "$2" = 1234 ]; then echo "induction-$1"; else echo "induction-$1-seed$2"; fi
}

pack() {  # pack every finished store into $OUT, once: a later call's copy of the working tree puts the
  # committed data/ back, so a store is packed by the call in which it finished
  for run in "${RUNS[@]}"; do
    # shellcheck disable=SC2086
    name=$(name_of $run)
    if grep -q "^store data/$name" "runs/logs/$name.log" 2>/dev/null && [ ! -f "runs/logs/$name.packed" ]; then
      tar czf "$OUT/stores-$name.tar.gz" -C data "$name" && touch "runs/logs/$name.packed"
    fi
  done
  tar czf "$OUT/logs.tar.gz" runs/logs runs/*/run.json 2>/dev/null
}

progress() {
  for run in "${RUNS[@]}"; do
    # shellcheck disable=SC2086
    name=$(name_of $run)
    echo "$(date +%T) $name: $(tail -n 1 "runs/logs/$name.log" 2>/dev/null | cut -c1-160)"
  done
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
}

running() { pgrep -f "scripts/induction-runs.sh" >/dev/null; }

case "${1:-}" in
  start)
    install
    nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, torch.cuda.get_device_name(), transformers.__version__)"
    for run in "${RUNS[@]}"; do
      # shellcheck disable=SC2086
      name=$(name_of $run)
      # three torch threads each: five chains and the tests on sixteen cores
      DEVICE=cuda INSTALL=0 OMP_NUM_THREADS=3 setsid nohup bash -c \
        "bash scripts/induction-runs.sh train $run && bash scripts/induction-runs.sh store $run" \
        >"runs/logs/$name.log" 2>&1 </dev/null &
    done
    OMP_NUM_THREADS=2 timeout $((LIMIT - 30)) python3 -m pytest -m cuda -p no:cacheprovider -q -rA \
      tests/integration/test_cuda.py tests/unit/test_heads.py 2>&1 | tee "$OUT/pytest-cuda.txt" | tail -n 40
    while running && [ $((SECONDS - START)) -lt "$LIMIT" ]; do progress; pack; sleep 20; done
    progress; pack
    # how far each unfinished store got (its folder survives only while this machine is held)
    for f in runs/*-store/llc.parquet; do
      [ -f "$f" ] && python3 -c "import sys, pyarrow.parquet as pq; t = pq.read_table(sys.argv[1]); print(sys.argv[1], t.num_rows, 'rLLC rows')" "$f"
    done
    if ! running && [ $((SECONDS - START)) -lt $((LIMIT - 90)) ]; then
      OMP_NUM_THREADS=8 timeout $((LIMIT - (SECONDS - START) - 10)) python3 -m benchmarks.llc_batched --shape pythia-160m \
        --device cuda --paths batched:0 --all-heads 2>&1 | tee "$OUT/bench-llc-160m-cuda.txt" | tail -n 20
    fi
    ;;
  collect)
    install
    while running && [ $((SECONDS - START)) -lt "$LIMIT" ]; do progress; pack; sleep 15; done
    progress; pack
    if ! running && [ $((SECONDS - START)) -lt $((LIMIT - 90)) ]; then
      # the GPU to itself: the batched rLLC on the Pythia-160M shape (a first- and a last-layer head, the
      # whole model), then every lens on the reference shape
      timeout $((LIMIT - (SECONDS - START) - 20)) python3 -m benchmarks.llc_batched --shape pythia-160m \
        --device cuda --paths batched:0 --all-heads 2>&1 | tee "$OUT/bench-llc-160m-cuda.txt" | tail -n 20
      left=$((LIMIT - (SECONDS - START) - 15))
      [ "$left" -gt 30 ] && timeout "$left" python3 -m benchmarks.bench_lenses --device cuda 2>&1 \
        | tee "$OUT/bench-lenses-cuda.txt" | tail -n 30
    fi
    ;;
  check)  # the CUDA tests, then the batched rLLC on the Pythia-160M shape, no runs
    install
    nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, torch.cuda.get_device_name(), transformers.__version__)"
    OMP_NUM_THREADS=8 timeout $((LIMIT / 2)) python3 -m pytest -m cuda -p no:cacheprovider -q -rA \
      tests/integration/test_cuda.py tests/unit/test_heads.py 2>&1 | tee "$OUT/pytest-cuda.txt" | tail -n 30
    OMP_NUM_THREADS=8 timeout $((LIMIT - (SECONDS - START) - 10)) python3 -m benchmarks.llc_batched --shape pythia-160m \
      --device cuda --paths batched:0 --all-heads 2>&1 | tee "$OUT/bench-llc-160m-cuda.txt" | tail -n 20
    ;;
  *) sed -n 2,12p "$0"; exit 2 ;;
esac
