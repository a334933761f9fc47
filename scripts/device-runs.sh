#!/usr/bin/env bash
# The shipped runs, retrained and their stores rebuilt on one CUDA machine (the device machine of
# docs/induction-recipe.md, "Trained on a GPU"), with the CUDA tests beside them. Seven chains run
# side by side, one per run: the induction ladder (d128 seeds 1234 and 2, d64, d256, d512;
# scripts/induction-runs.sh's recipe) and the two plain-text runs (scripts/reference-run.sh's recipe,
# seeds 1234 and 2). Each chain trains, builds its store in three passes and packs it after each:
#   pass 1: attention, composition, similarity, essential, losses and ablation (every checkpoint; the head types,
#           multigram and other heads included, and the stages follow);
#   pass 2: the refined LLC at every checkpoint under the run's training distribution and the held-out text
#           (--llc-data train,text: the weight-refined LLC and the estimates shipped so far), added to the same store;
#   pass 3: the refined LLC under the probe's repeats and code (--llc-data repeats,code: the data-refined LLCs of
#           the refined-LLC study), added beside them.
# One script for issues 59 (what a head does) and 60 (the refined LLC under named data): a GPU retrain is bit for bit
# the shipped runs' (docs/induction-recipe.md), so the rebuilt stores keep every figure the docs quote and gain the
# new lenses. A call too short for every pass packs what finished; `collect` on the same machine goes on.
# Usage (on the GPU machine, in the repository root, wheels of the missing packages under .whl/):
#   bash scripts/device-runs.sh start SECONDS    # install, start the chains in the background (setsid),
#                                                #   run `pytest -m cuda`, pack what finishes until SECONDS
#   bash scripts/device-runs.sh collect SECONDS  # pack what finishes until SECONDS (the same machine)
#   bash scripts/device-runs.sh bench SECONDS    # the CUDA benchmarks alone: the batched rLLC against devinterp,
#                                                #   the ablation lens against a pass per head (induction-d128
#                                                #   and the Pythia-160M shape)
# SIZES="text" (or "d128 text", ..., or all; default "d512 text", the stores still owing a lens) starts only the chains
# of those sizes: the GPU to fewer chains (what a run of all seven took, and what it left undone:
# docs/induction-recipe.md, "The shipped stores, built on a GPU").
# Every store is packed into $OUT/stores-<name>.tar.gz (its top folder <name>, to unpack into data/)
# once after each pass; logs, the CUDA tests' output and the runs' run.json go to $OUT/logs.tar.gz.
# At most eight files come back from a call: seven stores and the logs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT" runs/logs
START=$SECONDS
LIMIT=${2:-300}
# SIZE SEED NICE: the default run first; the d512 rung last (the CPU is the launch queue of these small
# models, so niceness orders them)
RUNS=("d128 1234 0" "d128 2 2" "d64 1234 2" "d256 1234 2" "text 1234 4" "text 2 4" "d512 1234 8")
# By default only the runs whose shipped stores still lack a lens of issues 59 and 60: d512 (every new lens) and the
# plain-text runs (the refined LLC alone: rebuilt on the CPU on 2026-11-29 with every other lens, docs/reference-run.md;
# d64, both d128 seeds and d256 were rebuilt on the CPU with every lens, docs/induction-recipe.md). The GPU retrains
# the plain-text runs too, so their stores become GPU-trained again (their validation losses within 6.4e-4 nats of the
# CPU runs'). SIZES=all retrains all seven (the four CPU-built induction stores then become GPU-built ones and their
# figures move).
SIZES=${SIZES:-d512 text}
if [ "$SIZES" != all ]; then
  kept=()
  for run in "${RUNS[@]}"; do
    case " $SIZES " in *" ${run%% *} "*) kept+=("$run") ;; esac
  done
  RUNS=("${kept[@]}")
fi
LENSES=(--lenses attention --lenses composition --lenses similarity --lenses essential --lenses losses --lenses ablation)

install() {
  # into the interpreter itself, so that the subprocesses the tests start see them too (WHEELS=0: the Python on
  # PATH as it is, as for a dry run here)
  if [ "${WHEELS:-1}" != 0 ] && [ ! -f /tmp/wheels.done ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .whl/*.whl \
      && touch /tmp/wheels.done || { echo "wheels did not install" >&2; exit 1; }
  fi
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
}

name_of() {  # SIZE SEED -> store name
  local base=induction-$1
  [ "$1" = text ] && base=shakespeare-pythia-6x8
  if [ "$2" = 1234 ]; then echo "$base"; else echo "$base-seed$2"; fi
}

run_of() {  # SIZE SEED -> training run folder
  if [ "$1" = text ]; then echo "runs/$(name_of "$1" "$2")"; else echo "runs/ih-$1-s$2"; fi
}

chain() {  # SIZE SEED: train, then the store's two passes (run in the background, one log per chain)
  local size=$1 seed=$2 name run stage t0=$SECONDS
  name=$(name_of "$size" "$seed"); run=$(run_of "$size" "$seed"); stage=runs/$name-store
  if [ "$size" = text ]; then
    [ -f "$run/run.json" ] || { rm -rf "$run"; python3 -m headwatch.training --out "$run" --device cuda --seed "$seed" || return 1; }
    local eval=()
  else
    bash scripts/induction-runs.sh train "$size" "$seed" || return 1
    local eval=(--eval-length 64)
  fi
  echo "TRAINED $run in $((SECONDS - t0)) s"
  rm -rf "$stage"
  python3 -m headwatch.precompute --source "$run" --out "$stage" --device cuda --model-id "$name" --no-progress \
    "${eval[@]}" "${LENSES[@]}" || return 1
  echo "PASS1 $name in $((SECONDS - t0)) s"
  python3 -m headwatch.precompute --source "$run" --out "$stage" --device cuda --model-id "$name" --no-progress \
    "${eval[@]}" "${LENSES[@]}" --lenses llc --llc-steps all --llc-data train,text || return 1
  echo "PASS2 $name in $((SECONDS - t0)) s"
  python3 -m headwatch.precompute --source "$run" --out "$stage" --device cuda --model-id "$name" --no-progress \
    "${eval[@]}" "${LENSES[@]}" --lenses llc --llc-steps all --llc-data repeats,code || return 1
  echo "PASS3 $name in $((SECONDS - t0)) s"
}

pack() {  # pack each store after each pass, once
  for run in "${RUNS[@]}"; do
    # shellcheck disable=SC2086
    set -- $run
    local name; name=$(name_of "$1" "$2")
    for pass in PASS3 PASS2 PASS1; do
      if grep -q "^$pass $name" "runs/logs/$name.log" 2>/dev/null; then
        if [ ! -f "runs/logs/$name.$pass.packed" ]; then
          tar czf "$OUT/stores-$name.tar.gz" -C runs --exclude='*.lock' --transform "s,^$name-store,$name," "$name-store" \
            && touch "runs/logs/$name.$pass.packed"
        fi
        break
      fi
    done
  done
  tar czf "$OUT/logs.tar.gz" runs/logs runs/*/run.json 2>/dev/null
}

progress() {
  for run in "${RUNS[@]}"; do
    # shellcheck disable=SC2086
    set -- $run
    local name; name=$(name_of "$1" "$2")
    echo "$(date +%T) $name: $(tail -n 1 "runs/logs/$name.log" 2>/dev/null | cut -c1-150)"
  done
  for f in runs/*-store/llc.parquet; do
    [ -f "$f" ] && python3 -c "import sys, pyarrow.parquet as pq; print(sys.argv[1], len(set(pq.read_table(sys.argv[1], columns=['step'])['step'].to_pylist())), 'steps with rLLC')" "$f"
  done
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
}

running() { pgrep -f "device-runs.sh chain" >/dev/null; }

case "${1:-}" in
  start)
    install
    nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, torch.cuda.get_device_name(), transformers.__version__)"
    for run in "${RUNS[@]}"; do
      # shellcheck disable=SC2086
      set -- $run
      name=$(name_of "$1" "$2")
      # two torch threads each: seven chains and the tests on sixteen cores
      OMP_NUM_THREADS=2 INSTALL=0 DEVICE=cuda setsid nohup nice -n "$3" bash "$0" chain "$1" "$2" \
        >"runs/logs/$name.log" 2>&1 </dev/null &
    done
    OMP_NUM_THREADS=2 timeout $((LIMIT / 2)) python3 -m pytest -m cuda -p no:cacheprovider -q -rA \
      tests/integration/test_cuda.py tests/unit/test_heads.py > runs/logs/pytest-cuda.txt 2>&1
    tail -n 25 runs/logs/pytest-cuda.txt
    while running && [ $((SECONDS - START)) -lt "$LIMIT" ]; do progress; pack; sleep 30; done
    progress; pack
    ;;
  collect)
    install
    while running && [ $((SECONDS - START)) -lt "$LIMIT" ]; do progress; pack; sleep 20; done
    progress; pack
    ;;
  bench)
    # the batched rLLC against devinterp's path on the GPU, same settings, same machine, one
    # run (docs/benchmarks.md, "The CUDA run of the batched sampler"). Carry .whl (scripts/device-wheels.sh bench) and
    # runs/ih-d128-s1234/{step800,step1400,step2000,llc-tokens.npy} (the tokens: benchmarks.llc_batched
    # --save-tokens, so no corpus travels). BENCH_DEVICE=cpu BENCH_QUICK=1 is the dry run on a CPU (one
    # checkpoint, the 160M shape at 2 chains x 2 steps of 16 tokens).
    install
    dev=${BENCH_DEVICE:-cuda}
    command -v nvidia-smi >/dev/null && nvidia-smi -L
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
    d128=(python3 -m benchmarks.llc_batched --store data/induction-d128 --source runs/ih-d128-s1234
      --tokens runs/ih-d128-s1234/llc-tokens.npy --paths batched:0,devinterp:0 --device "$dev"
      --out "$OUT/llc-batched-induction-d128-$dev.csv")
    shape=(--shape pythia-160m)
    [ "${BENCH_QUICK:-0}" = 1 ] && shape+=(--chains 2 --burnin 0 --draws 2 --length 16)
    # induction-d128 at step 1,400 (inside the induction head's emergence): every head and the whole model, each
    # path in its own process at one torch thread, so that CPU-seconds compare as on the CPU
    # (each phase's log goes straight to $OUT too, so that a call cut short keeps what finished)
    OMP_NUM_THREADS=1 timeout $((LIMIT / 2)) "${d128[@]}" --steps 1400 2>&1 | tee "$OUT/bench-llc-d128-$dev.txt"
    # the Pythia-160M shape under the default sampler: both paths' first- and last-layer head and whole model,
    # then every head of the first and of the last layer together (the lens's own grouping)
    left=$((LIMIT - (SECONDS - START) - 20))
    [ "$left" -gt 30 ] && OMP_NUM_THREADS=1 timeout "$left" python3 -m benchmarks.llc_batched "${shape[@]}" \
      --device "$dev" --all-heads 2>&1 | tee "$OUT/bench-llc-160m-$dev.txt"
    # the two other checkpoints of item 2's three, appended to the same CSV, if time is left
    left=$((LIMIT - (SECONDS - START) - 20))
    [ "${BENCH_QUICK:-0}" = 1 ] || { [ "$left" -gt 30 ] && OMP_NUM_THREADS=1 timeout "$left" "${d128[@]}" \
      --steps 800,2000 2>&1 | tee -a "$OUT/bench-llc-d128-$dev.txt"; }
    python3 -m benchmarks.llc_batched --summary --out "$OUT/llc-batched-induction-d128-$dev.csv" 2>&1 \
      | tee "$OUT/bench-llc-d128-$dev-summary.txt"
    # the ablation lens against one forward pass per head (issue 59), the same code on the GPU: the d128 shape at
    # step 4,000 and the Pythia-160M shape (docs/benchmarks.md, "The ablation lens")
    left=$((LIMIT - (SECONDS - START) - 20))
    [ "$left" -gt 30 ] && timeout "$left" python3 -m benchmarks.bench_ablation --shape d128 \
      --checkpoint runs/ih-d128-s1234/step4000 --device "$dev" 2>&1 | tee "$OUT/bench-ablation-d128-$dev.txt"
    left=$((LIMIT - (SECONDS - START) - 20))
    [ "$left" -gt 30 ] && [ "${BENCH_QUICK:-0}" != 1 ] && timeout "$left" python3 -m benchmarks.bench_ablation \
      --shape pythia160m --device "$dev" 2>&1 | tee "$OUT/bench-ablation-160m-$dev.txt"
    ;;
  chain) install; chain "$2" "$3" ;;
  *) sed -n 2,16p "$0"; exit 2 ;;
esac
