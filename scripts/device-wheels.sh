#!/usr/bin/env bash
# The Python packages the device machine's image lacks, as py3.12 manylinux wheels under .whl/ (ignored by
# git), for `run`'s carry (docs/benchmarks.md, "The CUDA run of the batched sampler"; scripts/device-runs.sh installs
# them). The image (/work/.library/device/KINDS.md) has torch, transformers 5.17, huggingface_hub 1.33, numpy,
# pandas, pyarrow, xarray, scipy and the rest; the pins are requirements-precompute.txt's. Run here, where pip
# reaches the package registry:
#   bash scripts/device-wheels.sh bench   # the rLLC benchmarks: headwatch's own imports and devinterp's
#   bash scripts/device-wheels.sh start   # scripts/device-runs.sh start: the stores' lenses, training and the CUDA
#                                         #   tests (transformers 5.23 and huggingface_hub 2.4 as the shipped stores had)
# The working tree that travels is at most 64 MiB: the tracked files + every carried path (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# headwatch imports httpx2 (its own HTTP client) in precompute.sources at import
COMMON=(httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 typing_extensions==4.16.0)
case "${1:-}" in
  bench)
    # devinterp (--llc-implementation devinterp, the reference path the benchmark times) and what it imports
    # that the image does not have
    WANT=("${COMMON[@]}" devinterp==2.0.1 zarr==3.1.6 numcodecs==0.16.6 donfig==0.8.1.post1 google-crc32c==1.9.0
      datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 fsspec==2026.9.0 pydantic==2.14.3 pydantic_core==2.50.4
      annotated-types==0.8.0 typing-inspection==0.4.5)
    ;;
  start)
    WANT=("${COMMON[@]}" transformers==5.23.0 huggingface_hub==2.4.0 umap-learn==0.5.12 pynndescent==0.7.0 powerlaw==2.0.0)
    ;;
  *) sed -n 2,10p "$0"; exit 2 ;;
esac
rm -rf .whl && mkdir -p .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${WANT[@]}"
du -sh .whl
ls .whl
